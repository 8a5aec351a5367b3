"""``rmqtool diff STORE_A STORE_B [STORE...]``: the stores of a master and its slaves
compared offline (issue 38). The comparison is ``recovery.replicas``; this module opens
the stores, picks each one's release, renders the report and maps it to the exit status:
0 every pair agrees over its overlap (one a prefix of the other: a slave behind is lag,
not a problem), 4 some pair diverges, 8 a store cannot be read (or is refused), 2 usage.
It never writes, so never 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from ...formats.errors import StoreLayoutError
from ...recovery.brokerconf import layout_refusals
from ...recovery.findingcodes import FindingCode
from ...recovery.versions import BrokerProfile, parse_version, version_label
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..output import SCHEMA_VERSION, output_options, pick_columns, say
from ..progress import progress_bar, progress_option
from ..render import emit, render, summary_record

MESSAGE_COLUMNS = [
    ("side", "ONLY ON"),
    ("physical_offset", "OFFSET"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("queue_offset", "QUEUE OFFSET"),
    ("msg_id", "MSG ID"),
    ("keys", "KEYS"),
    ("in_consume_queue_a", "IN CQ A"),
    ("in_consume_queue_b", "IN CQ B"),
]
QUEUE_COLUMNS = [
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("a_queue_offsets", "A OFFSETS"),
    ("b_queue_offsets", "B OFFSETS"),
    ("differing_units", "UNITS DIFFER"),
    ("first_difference_at", "FIRST DIFFERENCE"),
]
FOLLOWER_COLUMNS = [
    ("new_master", "NEW MASTER"),
    ("replica", "REPLICA"),
    ("outcome", "HANDSHAKE"),
    ("consistent_point", "CONSISTENT POINT"),
    ("truncated_bytes", "TRUNCATED BYTES"),
    ("behind_cut_count", "MESSAGES CUT"),
    ("lost", "LOST"),
]
# the csv columns (--columns picks among every field of the jsonl records)
CSV_COLUMNS = [
    ("pair", "PAIR"),
    ("a", "A"),
    ("b", "B"),
    ("relation", "RELATION"),
    ("side", "SIDE"),
    ("store", "STORE"),
    ("physical_offset", "OFFSET"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("queue_offset", "QUEUE OFFSET"),
    ("msg_id", "MSG ID"),
    ("uniq_key", "UNIQ KEY"),
    ("keys", "KEYS"),
    ("in_consume_queue_a", "IN CQ A"),
    ("in_consume_queue_b", "IN CQ B"),
]


@click.command("diff", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("stores", nargs=-1, type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--broker-version",
    default="auto",
    show_default=True,
    metavar="VERSION",
    envvar="RMQTOOL_BROKER_VERSION",
    help="RocketMQ release whose rules read every store (4.6.0 to 5.5.1), or auto: inferred for each store "
    "from what it shows. Environment: RMQTOOL_BROKER_VERSION.",
)
@click.option(
    "--limit",
    type=click.IntRange(0),
    default=20,
    show_default=True,
    metavar="N",
    help="List at most N messages of each side of a pair (and behind each cut); the counts are always complete.",
)
@progress_option
@output_options("json", columns="the messages")
def command(
    stores: tuple[Path, ...],
    broker_version: str,
    limit: int,
    fmt: str,
    columns: tuple[str, ...] | None,
    quiet: bool,
) -> int:
    """Compare the stores of a master and its slaves (any number of replicas, each pair in
    turn) offline, without writing to any: over the overlap of their commitlogs by
    physical offset, where they first differ (hashes of aligned ranges, then a binary
    search), the first divergence with both sides' records, the messages only on each side
    (topic, queue, offset, msg id, keys, and whether each side's consume queues reference
    them), and the consume queue, index and config differences. In controller mode (an
    epochFileCheckpoint in a store) also, for each replica taken as the new master, what
    it cuts itself and what each other replica's handshake truncates.

    Exit status: 0 every pair agrees over its overlap (a replica behind is lag, not a
    problem), 4 some pair diverges, 8 a store cannot be read, 2 usage error."""
    if len(stores) < 2:
        raise click.UsageError("give at least two stores (STORE_A STORE_B [STORE...])")
    if len({Path(s).resolve() for s in stores}) < len(stores):
        raise click.UsageError("a store is given twice")
    from ...recovery.replicas import DIVERGING, diff_replicas, open_side

    with ExitStack() as stack:
        opened = [(str(s), *_open(s, broker_version, quiet)) for s in stores]
        members = [o for o in opened if o[1].dledger is not None]
        if members and len(members) < len(opened):
            classic = next(o for o in opened if o[1].dledger is None)
            dmember = members[0][1].dledger
            raise StoreLayoutError(
                f"{members[0][0]} is a DLedger member and {classic[0]} a classic store: rmqtool diff compares "
                "classic replicas or the members of one DLedger group, not both",
                dmember.dir,
            )
        if members:
            report = _dledger_report(opened, stack, limit, quiet)
        else:
            # each replica's extent: the recovery walk of its last file; the others take the
            # first one's walk as far as their bytes agree (hashed once for the comparison too)
            sides = [open_side(*opened[0], stack)]
            # the bytes hashed (both sides of each pair; each range once): an estimate from the
            # first replica's extent, the bar follows the work
            n, size = len(opened), sides[0].end - sides[0].first
            with progress_bar(2 * size * (n - 1) * n // 2, "diff", quiet) as advance:
                sides += [open_side(*o, stack, like=sides[0], progress=advance) for o in opened[1:]]
                report = diff_replicas(sides, limit=limit, progress=advance)
                report["dledger"] = None
    code = int(Exit.PROBLEMS if report["diverged"] else Exit.OK)
    report["verdict"] = verdict(report, DIVERGING)
    report["exit_status"] = code
    report["schema_version"] = SCHEMA_VERSION
    with closed_stdout_ignored():
        write(report, fmt, columns, code)
    return code


def _dledger_report(opened: list[Any], stack: ExitStack, limit: int, quiet: bool) -> dict[str, Any]:
    """The members of one DLedger group compared (``recovery.replicas.dledger``)."""
    from ...recovery.replicas.dledger import diff_dledger, open_member

    members = [open_member(label, store, profile, stack) for label, store, profile in opened]
    total = 2 * sum(int(m.pos[-1] + m.size[-1] - m.pos[0]) if len(m.pos) else 0 for m in members)
    with progress_bar(max(total, 1), "diff", quiet) as advance:
        dlrep = diff_dledger(members, limit=limit, progress=advance)
    return {
        "replicas": [
            {
                "store": r["store"],
                "broker_version": r["broker_version"],
                "first_offset": int(m.maps.files[0].base) if m.maps.files else 0,
                "end_offset": r["end_offset"],
                "end": r["end"],
                "commitlog_files": r["data_files"],
            }
            for m, r in zip(members, dlrep["members"], strict=True)
        ],
        "pairs": [],
        "controller": None,
        "dledger": dlrep,
        "diverged": dlrep["diverged"],
    }


def _pairs(xs: list[Any]) -> Iterator[tuple[Any, Any]]:
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            yield xs[i], xs[j]


def _open(root: Path, version: str, quiet: bool) -> tuple[Any, BrokerProfile]:
    """The store at ``root`` and the profile of its release (auto: inferred for it)."""
    from ...recovery.store import Store

    for r in layout_refusals(Path(root)):
        if r.code == FindingCode.LAYOUT_DLEDGER:
            raise StoreLayoutError(r.message, Path(root) / r.path)
    store = Store.open(root)
    refusal = store.dledger_refusal
    if refusal is not None:
        raise StoreLayoutError(refusal.message, Path(root) / str(refusal.path))
    if version != "auto":
        try:
            v = parse_version(version)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--broker-version") from None
        return store, BrokerProfile.for_version(version_label(v))
    from ...recovery.identify import infer_version

    inf = infer_version(store)
    chosen = version_label(inf.assumed()) if inf.candidates else None
    if chosen is None:
        from ...recovery.versions import DEFAULT_VERSION

        chosen = DEFAULT_VERSION
    if not quiet:
        click.echo(
            f"rmqtool: note: --broker-version auto: {root}: emulating {chosen} ({inf.describe_evidence()})", err=True
        )
    return store, BrokerProfile.for_version(chosen)


def verdict(report: dict[str, Any], diverging: tuple[str, ...]) -> str:
    if report.get("dledger"):
        return _dledger_verdict(report["dledger"])
    parts = []
    for p in report["pairs"]:
        parts.append(f"{p['a']} and {p['b']}: {_relation_words(p)}")
    n = report["diverged"]
    head = f"{n} of {len(report['pairs'])} pair(s) diverge" if n else "no pair diverges"
    return head + "; " + "; ".join(parts)


def _dledger_verdict(d: dict[str, Any]) -> str:
    n = d["diverged"]
    head = f"{n} of {len(d['pairs'])} DLedger member pair(s) diverge" if n else "no DLedger member pair diverges"
    parts = [f"{p['a']} and {p['b']}: {_ledger_words(p)}" for p in d["pairs"]]
    el = d["election"]
    best = el["best"]
    win = [m["member"] for m in el["members"] if m["can_win"]]
    tail = (
        f"the highest last (term, index): {', '.join(best)}; can win an election: {', '.join(win) or 'none'}"
        if best
        else "no member's ledger loads"
    )
    for o in el["outlook"]:
        if o["leader"] in best:
            lost = [f"{f['member']} loses {f['lost_entries']}" for f in o["followers"] if f["lost_entries"]]
            tail += f"; under {o['leader']}: " + (", ".join(lost) if lost else "no member loses an entry")
            break
    return head + "; " + "; ".join(parts + [tail])


def _ledger_words(p: dict[str, Any]) -> str:
    rel = p["relation"]
    if rel == "identical":
        return "identical"
    if rel == "prefix":
        if p["behind"] is None:
            return "the same entries; one begins later"
        return f"{p[p['behind']]} is {p['lag_entries']} entries behind (a prefix)"
    if rel == "diverged":
        x = p["first_unequal_index"]
        ta = (p["a_entry"] or {}).get("term")
        tb = (p["b_entry"] or {}).get("term")
        return f"diverged at index {x} (term {ta} on {p['a']}, {tb} on {p['b']})"
    return "disjoint (no index in common)"


def _relation_words(p: dict[str, Any]) -> str:
    rel = p["relation"]
    if rel == "identical":
        return "identical"
    if rel == "prefix":
        if p["behind"] is None:
            return "the same data; one starts later"
        behind = p["a"] if p["behind"] == "a" else p["b"]
        ahead_side = "b" if p["behind"] == "a" else "a"
        n = p[f"only_on_{ahead_side}"]["count"]
        return f"{behind} is {p['lag_bytes']} bytes ({n} message(s)) behind (lag, a prefix)"
    if rel == "diverged":
        d = p["divergence"]
        return (
            f"diverged at offset {d['record_offset']} (first differing byte {d['first_differing_byte']}): "
            f"{p['only_on_a']['count']} message(s) only on {p['a']}, {p['only_on_b']['count']} only on {p['b']}"
        )
    return f"disjoint (a gap of {p['gap_bytes']} bytes between them)"


# ---------------------------------------------------------------------------------------
# output


def records(report: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The jsonl records: each replica, each pair, its listed messages, its differing
    queues and config entries, and in controller mode each handshake; for a DLedger group
    each member, each pair, the election and what each member loses under each leader."""
    if report.get("dledger"):
        yield from _dledger_records(report["dledger"])
        return
    for r in report["replicas"]:
        yield {"type": "replica", **r}
    for i, p in enumerate(report["pairs"]):
        head = {k: v for k, v in p.items() if k not in ("only_on_a", "only_on_b", "consume_queues", "index", "config")}
        for side in ("a", "b"):
            o = p[f"only_on_{side}"]
            head[f"only_on_{side}"] = {k: v for k, v in o.items() if k != "messages"}
        head["queues_differ"] = len(p["consume_queues"]["differ"])
        head["index"] = p["index"]
        yield {"type": "pair", "pair": i, **head}
        for side in ("a", "b"):
            for m in p[f"only_on_{side}"]["messages"]:
                yield {"type": "message", "pair": i, "side": side, "store": p[side], **m}
        for q in p["consume_queues"]["differ"]:
            yield {"type": "queue", "pair": i, **q}
        yield from _config_records(i, p["config"])
    ctl = report.get("controller")
    if ctl:
        for f in ctl["failover"]:
            yield {"type": "failover", **{k: v for k, v in f.items() if k != "followers"}}
            for h in f["followers"]:
                yield {"type": "handshake", "new_master": f["new_master"], **h}


def _dledger_records(d: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for n in d["notes"]:
        yield {"type": "note", "note": n}
    for m in d["members"]:
        yield {"type": "member", **m}
    for i, p in enumerate(d["pairs"]):
        head = {k: v for k, v in p.items() if k not in ("consume_queues", "config")}
        yield {"type": "ledger_pair", "pair": i, **head, "queues_differ": len(p["consume_queues"]["differ"])}
        for q in p["consume_queues"]["differ"]:
            yield {"type": "queue", "pair": i, **q}
        yield from _config_records(i, p["config"])
    el = d["election"]
    yield {"type": "election", **{k: v for k, v in el.items() if k != "outlook"}}
    for o in el["outlook"]:
        for f in o["followers"]:
            yield {"type": "truncation", **{k: v for k, v in f.items() if k != "entries"}}
            for e in f["entries"]:
                yield {"type": "lost_entry", "leader": f["leader"], "member": f["member"], **e}


def _config_records(i: int, cfg: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for label in ("topics", "subscription_groups"):
        d = cfg.get(label)
        if not d:
            continue
        for name in d["only_a"]:
            yield {"type": "config", "pair": i, "table": label, "name": name, "change": "only_a", "fields": []}
        for name in d["only_b"]:
            yield {"type": "config", "pair": i, "table": label, "name": name, "change": "only_b", "fields": []}
        for c in d["changed"]:
            yield {
                "type": "config",
                "pair": i,
                "table": label,
                "name": c["name"],
                "change": "changed",
                "fields": c["fields"],
            }
    co = cfg.get("consumer_offsets")
    if co:
        for r in co["differ"]:
            yield {"type": "consumer_offset", "pair": i, **r}


# the csv columns of a DLedger group's records
DL_CSV_COLUMNS = [
    ("store", "STORE"),
    ("a", "A"),
    ("b", "B"),
    ("relation", "RELATION"),
    ("first_unequal_index", "FIRST UNEQUAL INDEX"),
    ("last_index", "LAST INDEX"),
    ("last_term", "LAST TERM"),
    ("committed_index", "COMMITTED"),
    ("leader", "LEADER"),
    ("member", "MEMBER"),
    ("lost_entries", "LOST ENTRIES"),
    ("moved", "MOVED"),
    ("index", "INDEX"),
    ("term", "TERM"),
    ("pos", "POS"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("queue_offset", "QUEUE OFFSET"),
    ("msg_id", "MSG ID"),
    ("keys", "KEYS"),
    ("on_leader", "ON LEADER"),
]


def write(report: dict[str, Any], fmt: str, columns: tuple[str, ...] | None, code: int) -> None:
    if report.get("dledger"):
        shown = pick_columns(columns, DL_CSV_COLUMNS, DL_CSV_COLUMNS + CSV_COLUMNS + [("type", "TYPE")])
    else:
        shown = pick_columns(columns, CSV_COLUMNS, CSV_COLUMNS + [("type", "TYPE")])
    emit(
        fmt,
        records=records(report),
        columns=shown,
        kind="record",
        summary=lambda: summary_record(
            "diff",
            report["verdict"],
            code,
            stores=[r["store"] for r in report["replicas"]],
            pairs=len(report["pairs"]),
            diverged=report["diverged"],
            controller_mode=report["controller"] is not None,
            dledger=report.get("dledger") is not None,
        ),
        table=lambda: human(report, columns),
        document=lambda: report,
    )


def _cells(m: dict[str, Any], side_label: str) -> dict[str, Any]:
    return {**m, "side": side_label}


def human(report: dict[str, Any], columns: tuple[str, ...] | None) -> None:
    """The report for people."""
    if report.get("dledger"):
        _human_dledger(report, columns)
        return
    n = len(report["replicas"])
    say(f"rmqtool diff: {n} replicas")
    render(
        report["replicas"],
        "table",
        [
            ("store", "STORE"),
            ("broker_version", "RELEASE"),
            ("first_offset", "FIRST OFFSET"),
            ("end_offset", "END OFFSET"),
            ("commitlog_files", "FILES"),
            ("end", "WHERE IT ENDS"),
        ],
    )
    for p in report["pairs"]:
        say("")
        say(f"{p['a']} <-> {p['b']}: {_relation_words(p)}")
        if p.get("starts_later"):
            s = p["starts_later"]
            say(f"  {p[s['side']]} starts {s['bytes']} bytes later (it copied from a later file)")
        d = p.get("divergence")
        if d:
            for side in ("a", "b"):
                r = d[side] or {}
                say(
                    f"  {p[side]} at {d['record_offset']}: {r.get('status')}"
                    + (
                        f" {r.get('topic')}/{r.get('queue_id')} queue offset {r.get('queue_offset')} "
                        f"msg id {r.get('msg_id')} keys {' '.join(r.get('keys') or []) or '-'}"
                        if r.get("topic") is not None
                        else ""
                    )
                )
        rows = [_cells(m, p[side]) for side in ("a", "b") for m in p[f"only_on_{side}"]["messages"]]
        if rows:
            render(
                rows, "table", pick_columns(columns, MESSAGE_COLUMNS, CSV_COLUMNS), title="messages only on one side"
            )
        for side in ("a", "b"):
            o = p[f"only_on_{side}"]
            if o["truncated"]:
                say(f"  ({o['count'] - len(o['messages'])} more only on {p[side]}: --limit)")
            if o["moved"]:
                say(
                    f"  {o['moved']} message(s) of {p[side]} past the divergence are on "
                    f"{p['b' if side == 'a' else 'a']} too (the same UNIQ_KEY, else topic, born host and time, "
                    "keys and body CRC), in a record that differs or at another offset"
                )
        _human_stores(p)
    ctl = report.get("controller")
    if ctl:
        _human_controller(report)
    say("")
    say(f"verdict: {report['verdict']}")


def _human_stores(p: dict[str, Any]) -> None:
    """A pair's consume queues, index files and config files."""
    cq = p["consume_queues"]
    say(f"  consume queues: {cq['queues']} queue(s), {len(cq['differ'])} differ")
    if cq["differ"]:
        qrows = [{**q, "first_difference_at": (q["first_difference"] or {}).get("queue_offset")} for q in cq["differ"]]
        render(qrows, "table", QUEUE_COLUMNS)
    ia, ib = p["index"]["a"], p["index"]["b"]
    say(
        f"  index: {p['a']} {ia['files']} file(s), {ia['entries']} entries to offset {ia['end_phy_offset']}; "
        f"{p['b']} {ib['files']} file(s), {ib['entries']} entries to offset {ib['end_phy_offset']}"
    )
    ie = p["index"]["entries"]
    say(
        f"  index entries (key hash, commitlog offset): {ie['in_both']} on both, "
        f"{ie['only_on_a']['count']} only on {p['a']}, {ie['only_on_b']['count']} only on {p['b']}"
    )
    for side in ("a", "b"):
        shown = ie[f"only_on_{side}"]["entries"]
        if shown:
            say(
                f"    first only on {p[side]}: "
                + ", ".join(f"{e['commitlog_offset']} (hash {e['key_hash']})" for e in shown[:5])
            )
    for pr in ie["problems"]:
        say(f"  index: {pr}")
    _human_config(p)


LOST_COLUMNS = [
    ("leader", "LEADER"),
    ("member", "MEMBER"),
    ("index", "INDEX"),
    ("term", "TERM"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("queue_offset", "QUEUE OFFSET"),
    ("msg_id", "MSG ID"),
]


def _human_dledger(report: dict[str, Any], columns: tuple[str, ...] | None = None) -> None:
    d = report["dledger"]
    say(f"rmqtool diff: {len(d['members'])} members of a DLedger group")
    render(
        d["members"],
        "table",
        [
            ("store", "STORE"),
            ("member", "MEMBER"),
            ("broker_version", "RELEASE"),
            ("begin_index", "BEGIN"),
            ("last_index", "LAST INDEX"),
            ("last_term", "LAST TERM"),
            ("committed_index", "COMMITTED"),
            ("curr_term", "CURRTERM"),
            ("end", "WHERE IT ENDS"),
        ],
    )
    for note in d["notes"]:
        say(f"  note: {note}")
    for p in d["pairs"]:
        say("")
        say(f"{p['a']} <-> {p['b']}: {_ledger_words(p)}")
        for side in ("a", "b"):
            e = p[f"{side}_entry"]
            if e:
                say(
                    f"  {p[side]} index {e['index']}: term {e['term']} at {e['pos']}, {e['status']}"
                    + (
                        f" {e['topic']}/{e['queue_id']} queue offset {e['queue_offset']} msg id {e['msg_id']}"
                        if e.get("topic") is not None
                        else ""
                    )
                )
        _human_stores(p)
    el = d["election"]
    say("")
    say(f"election (a majority is {el['majority']} of {el['group_size']}):")
    for m in el["members"]:
        say(
            f"  {m['member']}: last term {m['last_term']}, last index {m['last_index']}: {m['votes']} vote(s), "
            + ("can win" if m["can_win"] else "cannot win")
        )
    rows = []
    for o in el["outlook"]:
        for f in o["followers"]:
            say(
                f"  under {o['leader']}: {f['member']} keeps through index {f['keeps_through_index']}, loses "
                f"{f['lost_entries']} entr{'y' if f['lost_entries'] == 1 else 'ies'} ({f['lost_committed']} it counted committed; "
                f"{f['moved']} of their messages on the leader too)"
                f", receives {f['gains_entries']}"
            )
            rows += [{"leader": o["leader"], "member": f["member"], **e} for e in f["entries"]]
    if rows:
        shown = pick_columns(columns, LOST_COLUMNS, LOST_COLUMNS + DL_CSV_COLUMNS)
        render(rows, "table", shown, title="entries lost")
    say("")
    say(f"verdict: {report['verdict']}")


def _human_config(p: dict[str, Any]) -> None:
    cfg = p["config"]
    for label in ("topics", "subscription_groups"):
        d = cfg.get(label)
        if d and (d["only_a"] or d["only_b"] or d["changed"]):
            say(
                f"  {label.replace('_', ' ')}: only on {p['a']}: {', '.join(d['only_a']) or '-'}; "
                f"only on {p['b']}: {', '.join(d['only_b']) or '-'}; changed: "
                + (", ".join(c["name"] for c in d["changed"]) or "-")
            )
    co = cfg.get("consumer_offsets")
    if co and co["differ"]:
        say(f"  consumer offsets: {len(co['differ'])} committed offset(s) differ")
    for pr in cfg.get("problems", []):
        say(f"  config: {pr}")


def _human_controller(report: dict[str, Any]) -> None:
    say("")
    say("controller mode (epochFileCheckpoint):")
    for r in report["replicas"]:
        e = r.get("epochs") or {}
        src = e.get("source")
        line = f"  {r['store']}: epochs {' '.join(f'{x}-{y}' for x, y in e.get('entries', [])) or '-'}"
        line += f" (from {'the .bak' if src == 'bak' else 'the file' if src else 'nothing'})"
        if e.get("broker_start_fails"):
            line += f"; the broker's start fails: {e['broker_start_fails']}"
        elif e.get("cache_empty_why"):
            line += f"; unreadable, the broker starts with no epochs: {e['cache_empty_why']}"
        say(line)
    rows = []
    for f in report["controller"]["failover"]:
        own = f.get("own_cut") or {}
        say(
            f"  {f['new_master']} as the new master (epoch {f['new_epoch']}): {f['outcome']}"
            + (f"; its recovery cuts {own.get('messages', 0)} message(s)" if own else "")
        )
        for h in f["followers"]:
            bc = h.get("behind_cut") or {}
            rows.append(
                {
                    "new_master": f["new_master"],
                    "replica": h["replica"],
                    "outcome": h["outcome"],
                    "consistent_point": h.get("consistent_point"),
                    "truncated_bytes": h.get("truncated_bytes"),
                    "behind_cut_count": bc.get("count", 0),
                    "lost": bc.get("lost", 0),
                }
            )
    if rows:
        render(rows, "table", FOLLOWER_COLUMNS)


__all__ = ["command", "records", "verdict"]
