"""Differential cases on DLedger stores (issue 37): rmqtool against RocketMQ's own DLedger
commitlog (the broker oracle: ``enableDLegerCommitLog`` in a scenario's config makes a
single-member DLedger group on a free loopback port; ``classic_first`` a mixed store).

A case (seed, version): a generated scenario written by that release (clean, or killed
mid-write), damaged or not, viewed by the same release (DLedger's own recovery, then the
consume queue recovery and dispatch, after its member elected itself and committed), and
rmqtool's results on the same bytes compared. Checks (the names the soak table uses):

* ``write``: the harness wrote the store;
* ``dump``: ``dump commitlog`` holds every record the broker reads, field for field (a
  DLedger padding's length is its second int);
* ``entries``: ``dump dledger`` gives the broker's entries (index, term, pos, size, magic,
  channel, CRCs, body length) up to where DLedger's recovery ends the ledger;
* ``verify``: the outlook's stop is where the broker's DLedger store ends after its load,
  its committed index and position are the broker's after load, loads = the broker's load
  (and its exit);
* ``rebuild``: ``rebuild-index`` of a copy without consumequeue/ and index/ writes the
  broker's consume queues (entry for entry, and their files byte for byte) and key lookups;
* ``recover``: ``recover`` (the broker's mode) ends where the broker ends and leaves its
  consume queues; ``reopen``: the broker opens the store rmqtool recovered and sees what it
  saw after its own recovery.

Every comparison returns one-line disagreements (empty: agreement); ``run_dl_case`` is
shared by the pytest tests and ``bench/dledger_soak.py``."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import diffcase as dc

# one release per DLedger library release RocketMQ ships (check_poms: rocketmq-store's pom)
DLEDGER_RELEASES = {
    "4.6.1": "0.1",  # 4.5.0-4.7.x
    "4.8.0": "0.2.2",  # 4.8.0-4.9.2
    "4.9.4": "0.2.6",  # (4.9.3 ships 0.2.3: the same format and recovery as 0.2.6 but a spelling)
    "4.9.8": "0.3.1.2",  # 4.9.5-4.9.8, 5.1.1-5.3.x
    "5.0.0": "0.3.1",  # 5.0.0, 5.1.0
    "5.3.3": "0.3.1.2",
    "5.5.1": "0.3.3.4",  # (5.4.0 and 5.5.0 ship 0.3.2: the same files)
}


def sparse_copy(src: Path, dst: Path) -> None:
    """A copy of a store that keeps holes (DLedger's 160 MiB index files are sparse)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)


# ---------------------------------------------------------------------------------------
# scenarios and damage


def gen_dl_scenario(seed: int, version: str, *, max_messages: int = 150) -> dict[str, Any]:
    """A DLedger scenario: diffcase's messages (keys, tags, properties, transactions,
    delays, batches, IPv6 hosts), a DLedger commitlog, sometimes a mixed store, a clean or
    killed end, and DLedger-aware damage. Deterministic in (seed, version)."""
    sc = dc.gen_scenario(seed, version, max_messages=max_messages)
    rng = random.Random(f"dledger:{seed}:{version}")
    cfg = sc["config"]
    for k in ("enabledAppendPropCRC", "forceVerifyPropCRC"):
        cfg.pop(k, None)
    cfg["enableDLegerCommitLog"] = True
    cfg["mappedFileSizeConsumeQueue"] = 20 * rng.choice([300, 600])  # (tiny queue files: kills land mid-creation)
    n = len(sc["messages"])
    if rng.random() < 0.25 and n > 2:
        sc["classic_first"] = rng.randint(1, n - 1)
        # (the classic phase's messages must not refer to later ones: transactions are local)
    sc["damage"] = gen_dl_damage(rng, sc["end"]["mode"])
    sc["probe_duplication"] = False
    return sc


# damage to the data files' bytes (after the broker dispatched them)
DATA_DAMAGE = ("entry_bitflip", "message_bitflip", "zero_tail")
DL_DAMAGE = [
    "entry_bitflip",  # a bit of an entry's header
    "message_bitflip",  # a bit of a message's bytes
    "zero_tail",
    "index_unit",  # a unit of the index overwritten
    "remove_index",
    "checkpoint_committed",  # committedIndex rewritten (lower, garbage, removed)
    "remove_checkpoint",
    "remove_currterm",
    "remove_cq_file",
    "remove_abort",
    "add_abort",
]


def gen_dl_damage(rng: random.Random, end_mode: str) -> list[dict[str, Any]]:
    if rng.random() < (0.5 if end_mode == "kill" else 0.4):
        return []
    return [
        {"kind": rng.choice(DL_DAMAGE), "r": rng.random(), "bit": rng.randint(0, 7), "n": rng.randint(1, 4096)}
        for _ in range(rng.choice([1, 1, 2]))
    ]


def _member(store: Path) -> Path | None:
    ds = sorted(store.glob("dledger-*"))
    return ds[0] if ds else None


def apply_dl_damage(store: Path, damage: list[dict[str, Any]]) -> list[str]:
    """Damage the store in place (deterministic from the descriptors); what was done."""
    from rmqtool.formats import dledger as dl

    done: list[str] = []
    m = _member(store)
    data = sorted((m / "data").iterdir()) if m is not None and (m / "data").is_dir() else []
    used = [p for p in data if dc.data_end(p) > 0]
    for d in damage:
        k, r = d["kind"], d["r"]
        if k in ("entry_bitflip", "message_bitflip") and used:
            p = used[int(r * len(used)) % len(used)]
            buf = p.read_bytes()
            starts = []
            pos = 0
            while pos + dl.BODY_OFFSET <= len(buf):
                h = dl.read_entry_header(buf, pos)
                if h.magic != dl.MAGIC_1 or h.size <= 0:
                    break
                starts.append((pos, h.size))
                pos += h.size
            if not starts:
                continue
            s, size = starts[int(r * 7919) % len(starts)]
            at = s + (
                int(r * 1_000_003) % dl.BODY_OFFSET
                if k == "entry_bitflip"
                else dl.BODY_OFFSET + int(r * 1_000_003) % (size - dl.BODY_OFFSET)
            )
            dc.flip_bit(p, at, d["bit"])
            done.append(f"{k} {p.name}@{at} bit {d['bit']}")
        elif k == "zero_tail" and used:
            done.append(dc.zero_tail(used[-1], d["n"]))
        elif k == "index_unit" and m is not None and (m / "index").is_dir():
            idx = sorted((m / "index").iterdir())
            if idx:
                units = 0
                with open(idx[0], "rb") as f:
                    while f.read(32).strip(b"\0"):
                        units += 1
                if units:
                    u = int(r * units) % units
                    with open(idx[0], "r+b") as f:
                        f.seek(u * 32 + 4 + (d["bit"] % 8))
                        f.write(b"\x5a")
                    done.append(f"index unit {u}")
        elif k == "remove_index" and m is not None and (m / "index").is_dir():
            for p in sorted((m / "index").iterdir()):
                p.unlink()
                done.append(f"rm {p.relative_to(store)}")
        elif k == "checkpoint_committed" and m is not None and (m / "checkpoint").is_file():
            text = (m / "checkpoint").read_text()
            choice = int(r * 3)
            if choice == 0:
                new = "".join(
                    f"committedIndex={max(-1, int(line.split('=')[1]) // 2)}\n"
                    if line.startswith("committedIndex=")
                    else line + "\n"
                    for line in text.splitlines()
                )
            elif choice == 1:
                new = "".join(line + "\n" for line in text.splitlines() if not line.startswith("committedIndex="))
            else:
                new = text.replace("committedIndex=", "committedIndex=x")
            (m / "checkpoint").write_text(new)
            done.append(f"checkpoint committedIndex ({['halved', 'removed', 'garbage'][choice]})")
        elif k == "remove_checkpoint" and m is not None and (m / "checkpoint").is_file():
            (m / "checkpoint").unlink()
            done.append("rm dledger checkpoint")
        elif k == "remove_currterm" and m is not None and (m / "currterm").is_file():
            (m / "currterm").unlink()
            done.append("rm currterm")
        elif k in dc.STORE_DAMAGE:
            done += dc.apply_damage(store, [d])
    return done


def harness_scenario(sc: dict[str, Any]) -> dict[str, Any]:
    out = {k: sc[k] for k in ("config", "messages", "end")}
    if "classic_first" in sc:
        out["classic_first"] = sc["classic_first"]
    return out


# ---------------------------------------------------------------------------------------
# checks


def compare_dump_dl(view: dict[str, Any], ours: list[dict[str, Any]]) -> list[str]:
    """diffcase.compare_dump, a DLedger padding's length read from its second int."""
    fixed = dict(view)
    recs = []
    for r in view.get("commitlog_records") or []:
        if r.get("blank_end_of_file_record") and "dledger_blank_length" in r:
            r = dict(r, blank_total_size_field=r["dledger_blank_length"])
        recs.append(r)
    fixed["commitlog_records"] = recs
    return dc.compare_dump(fixed, ours)


def ledger_end(view: dict[str, Any]) -> int | None:
    d = (view.get("after_load_before_start") or {}).get("dledger") or {}
    return d.get("data_max_wrote_position")


def compare_entries(view: dict[str, Any], store: Path, version: str, config: dict[str, Any]) -> list[str]:
    """``dump dledger``'s entries up to the ledger's end against the broker's."""
    rc, out, err = dc.rmq(
        [
            "dump",
            "dledger",
            str(store),
            "--format",
            "jsonl",
            "--broker-version",
            dc.rmq_version(version),
            *dc.geometry_args(config),
        ]
    )
    if rc not in (0, 4):
        return [f"entries: dump dledger status {rc}: {err.strip()[-200:]}"]
    mine = [json.loads(x) for x in out.splitlines() if x.strip()]
    mine = [e for e in mine if e.get("type") == "entry" and e.get("status") != "BEYOND_LEDGER_END"]
    theirs = view.get("dledger_entries") or []
    bad = []
    keys = ("index", "term", "pos", "size", "magic", "channel", "chain_crc", "body_crc", "body_len")
    mk = {"pos": "offset", "body_len": "body_length"}
    t = [tuple(e.get(k) for k in keys) for e in theirs if "error" not in e]
    o = [tuple(e.get(mk.get(k, k)) for k in keys) for e in mine]
    if t != o:
        first = next((i for i, (a, b) in enumerate(zip(t, o)) if a != b), min(len(t), len(o)))
        bad.append(
            f"entries: broker {len(t)}, rmqtool {len(o)}; first difference #{first}: broker {t[first] if first < len(t) else None} rmqtool {o[first] if first < len(o) else None}"
        )
    return bad


def compare_verify_dl(view: dict[str, Any], store: Path, version: str, config: dict[str, Any]) -> list[str]:
    rc, txt, err = dc.rmq(
        [
            "verify",
            str(store),
            "--format",
            "json",
            "-q",
            "--broker-version",
            dc.rmq_version(version),
            *dc.geometry_args(config),
            *dc.walk_args(config),
        ]
    )
    try:
        report = json.loads(txt)
    except ValueError:
        return [f"verify: status {rc}, no JSON report: {err.strip()[:200]}"]
    rec = (report.get("summary") or {}).get("recovery") or {}
    bad = []
    loaded = bool(view.get("load_ok", True))
    if bool(rec.get("loads")) != loaded:
        bad.append(
            f"verify: outlook loads={rec.get('loads')} ({rec.get('load_blockers')}), broker load_ok={loaded} exit={view.get('broker_exit_requested')}"
        )
    exits = view.get("broker_exit_requested") is not None
    if exits != bool((rec.get("dledger") or {}).get("exits")):
        bad.append(f"verify: broker exits={exits}, outlook exits={(rec.get('dledger') or {}).get('exits')}")
    if not loaded:
        return bad + ([] if rc in (4, 8) else [f"verify: status {rc} on a store the broker does not load"])
    mode = rec.get("mode")
    stop = (rec.get(mode) or {}).get("stop_offset")
    want = ledger_end(view)
    if stop != want:
        bad.append(f"verify: outlook stop offset {stop}, the broker's DLedger store ends at {want}")
    d = rec.get("dledger") or {}
    b = (view.get("after_load_before_start") or {}).get("dledger") or {}
    for ours, theirs in (
        ("committed_index", "committed_index"),
        ("committed_pos", "committed_pos"),
        ("end_index", "ledger_end_index"),
        ("begin_index", "ledger_begin_index"),
    ):
        if d.get(ours) != b.get(theirs):
            bad.append(f"verify: {ours} {d.get(ours)}, broker after load {b.get(theirs)}")
    if rc not in (0, 4):
        bad.append(f"verify: status {rc}")
    return bad


def rebuild_dl(
    store: Path, version: str, config: dict[str, Any], view: dict[str, Any], work: Path, exact: bool
) -> list[str]:
    """rebuild-index of a copy without consumequeue/ and index/ against the broker's queues."""
    cp = work / "rebuilt"
    shutil.rmtree(cp, ignore_errors=True)
    shutil.rmtree(work / "rebuilt.bk", ignore_errors=True)
    sparse_copy(store, cp)
    shutil.rmtree(cp / "consumequeue", ignore_errors=True)
    shutil.rmtree(cp / "index", ignore_errors=True)
    rc, out, err = dc.rmq(
        [
            "rebuild-index",
            "--yes",
            str(cp),
            "--backup-dir",
            str(work / "rebuilt.bk"),
            "-q",
            "-j",
            "1",
            "--broker-version",
            dc.rmq_version(version),
            *dc.geometry_args(config),
        ]
    )
    if rc not in (0, 1, 4, 5):  # (4, 5: records rebuild-index could not dispatch, which it names)
        return [f"rebuild: status {rc}: {err.strip()[:200]}"]
    ours = dc.dump_queues(cp, config)
    theirs = {k: q for k, q in (view.get("consume_queues") or {}).items() if q.get("entries")}
    if not exact:
        # a message damaged after the broker dispatched it keeps its unit in the broker's
        # queue (DLedger's recovery never reads the messages, and the queues it kept are
        # not dispatched again); a dispatch from the ledger skips it (the reput steps over a
        # record that fails its check by the size it read), as rebuild-index does
        _rc, recs = dc.dump_records(store, version, config)
        damaged = {dc._where(r) for r in recs if r.get("type") == "message" and r.get("status") != "OK"}
        theirs = {
            k: dict(q, entries=[e for e in q["entries"] if e["phys_offset"] not in damaged]) for k, q in theirs.items()
        }
    v = dict(view, consume_queues=theirs)
    if exact:
        bad = dc.compare_queues(v, ours, "rebuild cq")
        files = view.get("files_after_rocketmq_shutdown") or {}
        bad += dc.compare_files_zeroed(files, cp, store, view, "consumequeue/", "rebuild cq file")
    else:
        bad = dc.compare_queues_superset(v, ours, "rebuild cq")
    return bad


def recover_dl(
    oracle: dc.Oracle, store: Path, version: str, config: dict[str, Any], view: dict[str, Any], work: Path
) -> tuple[list[str], list[str]]:
    """recover (the broker's mode) on a copy: its end and consume queues against the
    broker's own recovery; then the broker's view of the recovered copy against its view of
    the original (reopen)."""
    rec = work / "rec"
    shutil.rmtree(rec, ignore_errors=True)
    shutil.rmtree(work / "rec.bk", ignore_errors=True)
    sparse_copy(store, rec)
    rc, out, err = dc.rmq(
        ["recover", "--yes", str(rec), "--backup-dir", str(work / "rec.bk"), *dc.recover_args(version, config)]
    )
    if rc not in (0, 1, 4, 5):
        return [f"recover: status {rc}: {err.strip()[-200:]}"], []
    bad: list[str] = []
    end = ledger_end(view)
    # (DLedger's recovery ends the data where the ledger ends, damaged messages or not: the
    # broker's view lists the records only up to the first its check refuses)
    rc2, out2, _err = dc.rmq(
        ["dump", "dledger", str(rec), "--format", "jsonl", "--broker-version", dc.rmq_version(version)]
        + dc.geometry_args(config)
    )
    entries = [json.loads(x) for x in out2.splitlines() if x.startswith("{")]
    mine_end = max(
        (e["offset"] + e["size"] for e in entries if e.get("type") == "entry" and e.get("status") == "OK"),
        default=None,
    )
    if mine_end is None:  # (no entry: the ledger ends where its data begin, the divided offset)
        rc3, out3, _err = dc.rmq(
            ["dump", "dledger", "--state", str(rec), "--format", "jsonl", "--broker-version", dc.rmq_version(version)]
            + dc.geometry_args(config)
        )
        states = [json.loads(x) for x in out3.splitlines() if x.startswith("{")]
        mine_end = states[0].get("entries_end") if states else None
    if end and mine_end != end:
        bad.append(f"recover: the ledger's last entry ends at {mine_end}, the broker's DLedger store at {end}")
    ours = dc.dump_queues(rec, config)
    mine = without_units_past_the_ledger(view, version)
    v = dict(mine, consume_queues={k: q for k, q in (mine.get("consume_queues") or {}).items() if q.get("entries")})
    bad += dc.compare_queues(v, ours, "recover cq")
    bad += dc.compare_lookups(
        with_ledger_records(view), dc.key_lookups(rec, config, dc.view_queries(view)), "recover keys", superset=True
    )
    after = view_dl(oracle, version, view_config_of(config), rec)
    return bad, compare_reopen_dl(mine, after)


def with_ledger_records(view: dict[str, Any]) -> dict[str, Any]:
    """The view, its records joined by the message of every entry the broker's DLedger store
    holds (the view's walk stops at the first message its check refuses; the ledger and
    the broker's reput go on): the records an extra key hit may name."""
    have = {r.get("phys_offset") for r in view.get("commitlog_records") or []}
    extra = [
        {"phys_offset": e["pos"] + 48}
        for e in view.get("dledger_entries") or []
        if "error" not in e and e.get("pos") is not None and e["pos"] + 48 not in have
    ]
    return dict(view, commitlog_records=list(view.get("commitlog_records") or []) + extra)


def without_units_past_the_ledger(view: dict[str, Any], version: str) -> dict[str, Any]:
    """The broker's view without the consume queue units at or past the ledger's end that its
    5.2.0+ start keeps after a crash (dledgerRecoverAbnormally walks the messages past an
    entry DLedger's own recovery refuses; soak case 39005): recover truncates the queues at
    the ledger's end instead, a documented deviation (man rmqtool-recover, Deviations from
    the broker; tests/test_dledger.py asserts it)."""
    from rmqtool.recovery.versions import parse_version

    end = ledger_end(view)
    if end is None or dc.view_mode(view) != "abnormal" or parse_version(dc.rmq_version(version)) < (5, 2, 0):
        return view
    queues = {}
    for key, q in (view.get("consume_queues") or {}).items():
        entries = q.get("entries") or []
        kept = [e for e in entries if e["phys_offset"] < end]
        if len(kept) != len(entries):
            q = dict(q, entries=kept, max_offset=kept[-1]["cq_offset"] + 1 if kept else q.get("min_offset") or 0)
        queues[key] = q
    return dict(view, consume_queues=queues)


def view_config_of(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config)


def without_next_start_units(before: dict[str, Any], queues: dict[str, Any]) -> dict[str, Any]:
    """The queues of the reopen's view, without what the broker's next start writes where its
    own start left no consume queue unit at all (soak case 39050, 4.8.0): its truncation
    deleted every queue file (each first unit lay past the ledger's end) and counted each
    queue's maximum as the end offset, so its start-up reput dispatched nothing; any later
    start, the reopen of recover's result (the same bytes) as the broker's second start on
    its own, loads no queue file and reputs from the data's start. recover does per run what
    the broker does per start, so its next run writes those units (man rmqtool-recover,
    Where the broker is no fixed point; tests/test_dledger.py asserts it). Exactly that: only
    consistent units, each of a message the broker's ledger holds below its end."""
    if any(q.get("entries") for q in (before.get("consume_queues") or {}).values()):
        return queues
    end = ledger_end(before)
    held = {r["phys_offset"] for r in with_ledger_records(before)["commitlog_records"]}
    return {
        k: q
        for k, q in queues.items()
        if not all(
            e.get("consistent") is True and e["phys_offset"] in held and (end is None or e["phys_offset"] < end)
            for e in q.get("entries") or []
        )
    }


def compare_reopen_dl(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The broker's view of the store rmqtool recovered against its view of the original:
    the same records, offsets and consume queues; key lookups the same or more."""
    if not after.get("load_ok", True):
        return [dc.REOPEN_UNLOADED]
    bad = dc.reopen_records(before, after)
    nonempty = lambda v: {k: q for k, q in (v.get("consume_queues") or {}).items() if q.get("entries")}  # noqa: E731
    bad += [
        x.replace("rmqtool", "after rmqtool")
        for x in dc.compare_queues(
            dict(before, consume_queues=nonempty(before)),
            without_next_start_units(before, nonempty(after)),
            "reopen cq",
        )
    ]
    fake = {(q["topic"], q["key"]): dc.their_offsets(q) for q in after.get("query_message_by_key") or []}
    bad += dc.compare_lookups(with_ledger_records(before), fake, "reopen keys", superset=True)
    bd = [e for e in before.get("dledger_entries") or []]
    ad = [e for e in after.get("dledger_entries") or []]
    if bd != ad:
        bad.append(
            f"reopen: DLedger entries differ ({len(bd)} after the broker's own recovery, {len(ad)} after rmqtool's)"
        )
    return bad


def convert_dl(
    oracle: dc.Oracle,
    store: Path,
    version: str,
    config: dict[str, Any],
    view: dict[str, Any],
    work: Path,
    damaged: bool = False,
) -> list[str]:
    """``convert --to classic`` of the store, opened by the same release as a classic store:
    every committed message there (its fields but the offsets, in order), every queue with
    the same offsets and messages (units pointing at the mapped offsets), the keys found at
    the mapped offsets, config/ (the consumer offsets) the same."""
    out = work / "conv"
    shutil.rmtree(out, ignore_errors=True)
    (work / "conv.mapping.jsonl").unlink(missing_ok=True)
    rc, txt, err = dc.rmq(
        [
            "convert",
            str(store),
            "--to",
            "classic",
            str(out),
            "--broker-version",
            dc.rmq_version(version),
            "-q",
            "--format",
            "json",
            *dc.geometry_args(config),
        ]
    )
    if rc == 8 and "repair or recover the store first" in err and damaged:
        return []  # (convert refuses a ledger holding a message the broker's check refuses: by design)
    if rc != 0:
        return [f"convert: status {rc}: {err.strip()[-200:]}"]
    doc = json.loads(txt)
    committed = doc["plan"]["committed_index"]
    mapping = {}
    for line in (work / "conv.mapping.jsonl").read_text().splitlines():
        m = json.loads(line)
        mapping[m["old_phy"]] = m["new_phy"]
    classic = {k: v for k, v in config.items() if k != "enableDLegerCommitLog"}
    after = oracle.view(version, classic, out)
    if not after.get("load_ok"):
        return ["convert: the broker does not load the converted store"]
    bad = []
    if dc.view_mode(after) != "normal":
        bad.append(f"convert: the broker ran {after.get('recovery_mode')} recovery on the converted store")
    keep = []
    for r in view.get("commitlog_records") or []:
        if r.get("blank_end_of_file_record"):
            continue
        e = r.get("dledger_entry")
        if e is not None and (committed is None or e["index"] > committed):
            continue
        keep.append(r)
    mine = [r for r in after.get("commitlog_records") or [] if not r.get("blank_end_of_file_record")]
    skip = ("phys_offset", "msg_id", "prepared_transaction_offset", "dledger_entry")
    if len(keep) != len(mine):
        bad.append(f"convert: {len(keep)} committed messages, the converted store holds {len(mine)}")
    for a, b in zip(keep, mine):
        want = mapping.get(a["phys_offset"], a["phys_offset"])
        if b["phys_offset"] != want:
            bad.append(f"convert: message {a['phys_offset']} is at {b['phys_offset']}, the mapping says {want}")
            break
        da = {k: v for k, v in a.items() if k not in skip}
        db = {k: v for k, v in b.items() if k not in skip}
        if da != db:
            bad.append(
                f"convert: message {a['phys_offset']} differs: {sorted(k for k in da if da.get(k) != db.get(k))}"
            )
            break
    tq = {k: q for k, q in (view.get("consume_queues") or {}).items() if q.get("entries")}
    aq = {k: q for k, q in (after.get("consume_queues") or {}).items() if q.get("entries")}
    for key in sorted(set(tq) | set(aq)):
        te = [
            (
                e["cq_offset"],
                mapping.get(e["phys_offset"], e["phys_offset"]),
                e["size"],
                e["tags_code"],
                (e.get("message") or {}).get("body_sha256"),
                (e.get("message") or {}).get("uniq_key"),
            )
            for e in (tq.get(key) or {}).get("entries", [])
            if e["phys_offset"] in mapping or e["phys_offset"] < doc["plan"]["divided_offset"]
        ]
        ae = [
            (
                e["cq_offset"],
                e["phys_offset"],
                e["size"],
                e["tags_code"],
                (e.get("message") or {}).get("body_sha256"),
                (e.get("message") or {}).get("uniq_key"),
            )
            for e in (aq.get(key) or {}).get("entries", [])
        ]
        if damaged and set(te) <= set(ae):
            # (a store that lost queue units, or whose messages were damaged after their
            # dispatch: the converted store's queues are dispatched from the ledger whole)
            continue
        if te != ae:
            bad.append(
                f"convert: queue {key}: {len(te)} units before, {len(ae)} after; first difference {next((x for x in zip(te, ae) if x[0] != x[1]), None)}"
            )
    theirs = {
        (q["topic"], q["key"]): sorted(mapping.get(o, o) for o in dc.their_offsets(q))
        for q in view.get("query_message_by_key") or []
    }
    ours = {(q["topic"], q["key"]): dc.their_offsets(q) for q in after.get("query_message_by_key") or []}
    # (the converted store's index is built whole: it finds what the broker's finds, at the
    # mapped offsets, and may find more where the broker lost index files after a crash)
    converted = set(mapping.values())
    for k, offs in sorted(theirs.items()):
        got = set(ours.get(k, []))
        want = {o for o in offs if o in converted or o < doc["plan"]["divided_offset"]}
        if not want <= got:
            bad.append(f"convert: key {k}: the broker finds {sorted(want)} (mapped), the converted store {sorted(got)}")
            break
    a_cfg = {p.name: p.read_bytes() for p in (store / "config").glob("*.json")} if (store / "config").is_dir() else {}
    b_cfg = {p.name: p.read_bytes() for p in (out / "config").glob("*.json")} if (out / "config").is_dir() else {}
    if a_cfg != b_cfg:
        bad.append("convert: config/ differs from the source's")
    return bad


def garble_topic(store: Path, view: dict[str, Any], rng: random.Random) -> str | None:
    """One character of the topic of a message inside an entry changed to '/' (issue 33 R3's
    damage, TopicA -> Top/cA, in a DLedger store): neither the message's body CRC nor the
    entry's CRCs (0) cover it. A message of a topic of 4 characters or more whose queue holds
    another message, in the ledger; None when there is none."""
    from rmqtool.formats import commitlog as cl

    recs = [
        r
        for r in view.get("commitlog_records") or []
        if r.get("dledger_entry") is not None and len(r.get("topic") or "") >= 4 and not r["topic"].startswith("RMQ_")
    ]
    per_queue: dict[tuple[str, int], int] = {}
    for r in recs:
        per_queue[(r["topic"], r["queue_id"])] = per_queue.get((r["topic"], r["queue_id"]), 0) + 1
    recs = [r for r in recs if per_queue[(r["topic"], r["queue_id"])] >= 2]
    m = _member(store)
    if not recs or m is None:
        return None
    r = recs[rng.randrange(len(recs))]
    off = r["phys_offset"]
    path = next((p for p in sorted((m / "data").iterdir(), reverse=True) if int(p.name) <= off), None)
    if path is None:
        return None
    buf = bytearray(path.read_bytes())
    at = off - int(path.name)
    rec = cl.decode_message(buf, at)
    t = rec.body_pos + rec.body_length + (2 if rec.magic == cl.MAGIC_V2 else 1)
    k = rng.randrange(1, len(rec.topic) - 1)
    buf[t + k] = ord("/")
    path.write_bytes(bytes(buf))
    return f"garbled topic {rec.topic!r} at {off} (entry {r['dledger_entry'].get('index')})"


def repair_dl(
    oracle: dc.Oracle,
    store: Path,
    version: str,
    config: dict[str, Any],
    view: dict[str, Any],
    work: Path,
    seed: int,
    garble: bool | None = None,
) -> list[str]:
    """repair on a copy of the case's store (clean or killed, damaged or not; every other
    case also a garbled topic inside an entry: :func:`garble_topic`), then the same release
    opens the repaired store: a normal start, every message rmqtool's dump of the repaired
    store holds at its offset in the broker's records and none else, every record the broker
    saw in the store before (below where the repair ends the data) the same, or the tombstone
    the plan puts there (its queue and queue offset), every queue unit the broker had before
    (of a message kept) still there and every unit consistent, the ledger's entries before
    the end the same. Not in the default oracle run (bench/dledger_soak.py). ``garble``:
    whether to garble a topic (None: the seeded stream decides); a garble that finds no
    message to garble is a failure when asked for."""
    rep = work / "rep"
    shutil.rmtree(rep, ignore_errors=True)
    shutil.rmtree(work / "rep.bk", ignore_errors=True)
    sparse_copy(store, rep)
    rng = random.Random(f"dledger-repair:{seed}:{version}")
    draw = rng.random() < 0.5
    garbled = garble_topic(rep, view, rng) if (draw if garble is None else garble) else None
    if garble and garbled is None:
        return ["repair: no message to garble a topic of"]
    before = view
    if garbled is not None:
        before = view_dl(oracle, version, view_config_of(config), rep)
        if not before.get("load_ok", True):
            return []
    rc, out, err = dc.rmq(
        ["repair", "--yes", str(rep), "--backup-dir", str(work / "rep.bk"), *dc.recover_args(version, config)]
    )
    tag = f" ({garbled})" if garbled else ""
    if rc not in (0, 1, 4, 5):
        return [f"repair: status {rc}{tag}: {err.strip()[-200:]}"]
    doc = json.loads(out) if out.strip().startswith("{") else {}
    plan = doc.get("plan") or {}
    end = plan.get("data_end")
    quar = {q["offset"]: q for q in plan.get("quarantined") or [] if q.get("offset") is not None}
    tombs = {o: q for o, q in quar.items() if q.get("tombstone")}
    _rc, mine = dc.dump_records(rep, version, config)
    kept = {dc._where(r): r for r in mine if r.get("type") == "message" and r.get("status") == "OK"}
    after = view_dl(oracle, version, view_config_of(config), rep)
    if not after.get("load_ok", True):
        return [f"repair{tag}: the broker does not load the repaired store"]
    bad: list[str] = []
    if dc.view_mode(after) != "normal":
        bad.append(f"repair{tag}: the broker ran {after.get('recovery_mode')} recovery on the repaired store")
    a = {r["phys_offset"]: r for r in after.get("commitlog_records") or [] if not r.get("blank_end_of_file_record")}
    if set(a) != set(kept):
        bad.append(
            f"repair{tag}: messages rmqtool keeps and the broker does not see: {sorted(set(kept) - set(a))[:5]}; "
            f"the broker sees and rmqtool's dump does not: {sorted(set(a) - set(kept))[:5]}"
        )
    below = lambda o: end is None or o < end  # noqa: E731
    for r in before.get("commitlog_records") or []:
        off = r["phys_offset"]
        if r.get("blank_end_of_file_record") or not below(off):
            continue
        x = a.get(off)
        if off in tombs:
            q = tombs[off]
            got = None if x is None else (x["topic"], x["queue_id"], x["queue_offset"])
            if got != (q["topic"], q["queue_id"], q["queue_offset"]):
                bad.append(f"repair{tag}: tombstone at {off}: {got}, the plan's {q['topic']}/{q['queue_id']}")
        elif off in quar:
            continue
        elif x != r:
            bad.append(
                f"repair{tag}: the record at {off} the broker saw before is {'gone' if x is None else 'changed'}"
            )
        if len(bad) > 5:
            break
    after_units = {
        (k, e["cq_offset"], e["phys_offset"], e["size"])
        for k, q in (after.get("consume_queues") or {}).items()
        for e in q.get("entries") or []
    }
    for k, q in (before.get("consume_queues") or {}).items():
        for e in q.get("entries") or []:
            o = e["phys_offset"]
            if o in quar or not below(o) or o not in kept or e.get("consistent") is not True:
                continue
            if (k, e["cq_offset"], o, e["size"]) not in after_units:
                bad.append(f"repair{tag}: queue {k} unit {e['cq_offset']} -> {o} the broker had is gone")
                break
    for k, q in (after.get("consume_queues") or {}).items():
        if any(e.get("consistent") is not True for e in q.get("entries") or []):
            bad.append(f"repair{tag}: queue {k}: a unit the broker finds inconsistent")
    eb = [e for e in before.get("dledger_entries") or [] if "error" not in e and below(e.get("pos", 0))]
    ea = {e.get("pos"): e for e in after.get("dledger_entries") or [] if "error" not in e}
    if any(ea.get(e.get("pos")) != e for e in eb if e.get("pos", 0) + 48 not in quar):
        bad.append(f"repair{tag}: DLedger entries the broker had before differ after the repair")
    return bad


@dataclass
class DlResult:
    seed: int
    version: str
    scenario: dict[str, Any]
    results: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    damage_done: list[str] = field(default_factory=list)
    seconds: float = 0.0
    oracle: Any = None

    @property
    def ok(self) -> bool:
        return not any(self.results.values())

    def report(self) -> str:
        lines = [
            f"seed {self.seed} version {self.version} damage {self.damage_done} end {self.scenario['end']} mixed {self.scenario.get('classic_first')}"
        ]
        for c, bad in self.results.items():
            lines += [f"  [{c}] {b}" for b in bad]
        return "\n".join(lines)


def view_config(sc: dict[str, Any]) -> dict[str, Any]:
    return dict(sc["config"])


CHECKS = ("dump", "entries", "verify", "rebuild", "recover", "convert")
SOAK_CHECKS = (
    *CHECKS,
    "repair",
)  # (repair's check, a repair and a view more a case: the soak's, not the default run's)


def view_raced_commit(view: dict[str, Any]) -> bool:
    """Whether the broker's view read the commitlog's end in the instant between the lone
    member's raising its committed index and its committed position (soak case 39074, 5.0.0,
    the DLedger checkpoint removed: the store loads with both at -1). DLedger's
    updateCommittedIndex (every release 0.1-0.3.3.4) sets the index first, then the position,
    two plain fields; the harness waited on the index alone, and DLedgerCommitLog.getMaxOffset,
    finding no committed position yet, fell back to the data's first offset (the divided offset
    of a mixed store): the view then listed the records, and waited for the reput, only up to
    there. Its DLedger state, read after the records, showed every entry committed and the
    ledger ending past that end. Not the broker's recovery: a second view of the same bytes
    ended at the ledger's end. The harness now waits for both (DLedger.awaitCommitted), so
    :func:`view_dl` treats such a view as a fault of the harness."""
    d = view.get("dledger") or {}
    end, top = d.get("data_max_wrote_position"), view.get("commitlog_max_offset")
    return bool(
        view.get("dledger_committed_all")
        and isinstance(end, int)
        and isinstance(top, int)
        and isinstance(d.get("ledger_end_index"), int)
        and d["ledger_end_index"] >= 0
        and isinstance(d.get("committed_index"), int)
        and d["committed_index"] >= d["ledger_end_index"]
        and top < end
    )


def view_dl(oracle: dc.Oracle, version: str, config: dict[str, Any], store: Path) -> dict[str, Any]:
    """The broker's view of a DLedger store. The harness waits until the lone member committed
    every entry, its committed index and its committed position (DLedger.awaitCommitted), so
    the view cannot read the commitlog's end between the two any more: a view that did
    (:func:`view_raced_commit`) is the harness's fault, raised (it was taken again before)."""
    view = oracle.view(version, config, store)
    if view_raced_commit(view):
        raise dc.OracleError(
            "rocketmq-oracle view: the commitlog's end was read before the member's committed position "
            "(DLedger.awaitCommitted waits for it: a harness fault)"
        )
    return view


def run_dl_case(oracle: dc.Oracle, seed: int, version: str, work: Path, checks: tuple[str, ...] = CHECKS) -> DlResult:
    """One case end to end (one JVM per write and per view)."""
    t0 = time.monotonic()
    sc = gen_dl_scenario(seed, version)
    res = DlResult(seed, version, sc)
    res.oracle = oracle
    w = work / "w"
    shutil.rmtree(w, ignore_errors=True)
    try:
        result = oracle.write(version, harness_scenario(sc), w)
    except dc.OracleError as exc:
        res.results["write"] = [f"write: {exc}"]
        return res
    res.results["write"] = []
    store = w / "store"
    res.damage_done = apply_dl_damage(store, sc["damage"])
    view = view_dl(oracle, version, view_config(sc), store)
    _checks(res, store, version, sc["config"], view, work, result, checks)
    res.seconds = time.monotonic() - t0
    return res


def _checks(
    res: DlResult,
    store: Path,
    version: str,
    config: dict[str, Any],
    view: dict[str, Any],
    work: Path,
    result: dict[str, Any],
    checks: tuple[str, ...],
) -> None:
    loaded = view.get("load_ok", True)
    if "verify" in checks:
        res.results["verify"] = compare_verify_dl(view, store, version, config)
    if not loaded:
        for c in checks:
            if c != "verify":
                res.skipped[c] = "the broker does not load the store"
        return
    if "dump" in checks:
        _rc, recs = dc.dump_records(store, version, config)
        res.results["dump"] = compare_dump_dl(view, recs)
    if "entries" in checks:
        res.results["entries"] = compare_entries(view, store, version, config)
    if "rebuild" in checks and any(d.startswith(DATA_DAMAGE) for d in res.damage_done):
        # the broker's consume queues were dispatched from the entries before the damage
        # (DLedger's recovery never reads the messages; a start does not dispatch again),
        # rebuild-index's from the damaged bytes (soak seeds 39021, 39065; as diffcase's)
        res.skipped["rebuild"] = "DLedger data damaged: the broker's queues predate the damage"
    elif "rebuild" in checks:
        clean = result.get("clean_shutdown") and not res.damage_done
        res.results["rebuild"] = rebuild_dl(store, version, config, view, work, exact=bool(clean))
    if "convert" in checks and res.oracle is not None:
        res.results["convert"] = convert_dl(res.oracle, store, version, config, view, work, bool(res.damage_done))
    if "recover" in checks and res.oracle is not None:
        res.results["recover"], res.results["reopen"] = recover_dl(res.oracle, store, version, config, view, work)
    if "repair" in checks and res.oracle is not None:
        res.results["repair"] = repair_dl(res.oracle, store, version, config, view, work, res.seed)


def env_versions(default: tuple[str, ...]) -> list[str]:
    v = os.environ.get("RMQTOOL_DLEDGER_VERSIONS")
    return v.split(",") if v else list(default)
