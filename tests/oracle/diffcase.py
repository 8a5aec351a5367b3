"""Differential cases: rmqtool against RocketMQ's own storage code (the broker oracle).

The broker's side comes from ``tests/oracle/rocketmq-oracle`` (ORACLE_CONTRACT / the
harness's README): ``write`` makes a store with DefaultMessageStore of one release, ``view``
opens a copy, runs the broker's own recovery and reput, and prints what the broker sees
(``view.json``, the schema of fixtures/real/*/verify_after_rocketmq_recovery.json).

rmqtool's side is derived here from rmqtool's own outputs on the same store (``dump``,
``verify --format json``, ``recover``, ``rebuild-index``, run in-process through
``rmqtool.cli.run``), put into the view's field names, and compared. Every comparison
returns a list of one-line disagreements (empty: agreement), so the pytest tests and
``bench/oracle_soak.py`` share it.

Checks (the names the soak table uses):
* ``dump``: every record the broker parses between its min and max offsets, field by
  field, and no other intact record there;
* ``verify``: the recovery outlook's stop offset (in the mode the broker ran) is the
  broker's end offset, ``loads`` is the broker's load; exit status 0 only if the broker's
  recovery kept every record the writer had acknowledged;
* ``rebuild``: on the recovered store with consumequeue/ and index/ removed,
  ``rebuild-index`` writes the broker's consume queue files byte for byte and its key
  lookups (for clean undamaged stores also its index files byte for byte, name order);
* ``recover``: ``recover`` (the broker's mode) ends where the broker ends and leaves the
  broker's consume queues and (at least) its key lookups;
* ``reopen``: the broker opens the store rmqtool recovered, and its view equals its view
  of the original store after its own recovery (index lookups: rmqtool keeps index files
  the broker deletes after a crash, so the broker may find more there, never less;
  man rmqtool-recover, --reindex-all).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------
# running rmqtool in-process


def rmq(args: list[str]) -> tuple[int, str, str]:
    """``rmqtool ARGS`` in this interpreter: (exit status, stdout, stderr)."""
    from rmqtool.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(list(args))
    return rc, out.getvalue(), err.getvalue()


def geometry_args(config: dict[str, Any]) -> list[str]:
    args = []
    for opt, key in (
        ("--commitlog-file-size", "mappedFileSizeCommitLog"),
        ("--cq-file-size", "mappedFileSizeConsumeQueue"),
        ("--index-slots", "maxHashSlotNum"),
        ("--index-entries", "maxIndexNum"),
    ):
        if key in config:
            args += [opt, str(config[key])]
    return args


def rmq_version(version: str) -> str:
    """The --broker-version rmqtool is given for a harness version: the same release
    (rmqtool knows every release the harness lists); one rmqtool does not know would be
    emulated as the newest it knows, and a disagreement then counts against that release
    in the soak table."""
    from rmqtool.recovery.versions import parse_version

    try:
        parse_version(version)
        return version
    except ValueError:
        from rmqtool.recovery.versions import NEWEST, version_label

        return version_label(NEWEST)


# ---------------------------------------------------------------------------------------
# rmqtool's view of a store, in the broker view's names

# broker view field -> rmqtool dump field
RECORD_FIELDS = {
    "phys_offset": "physical_offset",
    "size": "total_size",
    "body_len": "body_length",
    "body_crc_stored": "body_crc",
    "body_crc_ok": "crc_ok",
    "tags_code_computed_by_dispatch": "tags_code",
    "born_host": "born_host",
    "born_timestamp": "born_timestamp",
    "flag": "flag",
    "msg_id": "msg_id",
    "prepared_transaction_offset": "prepared_transaction_offset",
    "properties": "properties",
    "queue_id": "queue_id",
    "queue_offset": "queue_offset",
    "reconsume_times": "reconsume_times",
    "store_host": "store_host",
    "store_timestamp": "store_timestamp",
    "sys_flag": "sys_flag",
    "tags": "tags",
    "topic": "topic",
    "transaction_type": "transaction_type",
    "uniq_key": "uniq_key",
    "body_sha256": "body_sha256",
}


def dump_records(store: Path, version: str, config: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """``rmqtool dump commitlog --body-hash --format jsonl``: (status, records)."""
    rc, out, err = rmq(
        [
            "dump",
            "commitlog",
            str(store),
            "--body-hash",
            "--format",
            "jsonl",
            "--broker-version",
            rmq_version(version),
            *geometry_args(config),
        ]
    )
    if rc not in (0, 4):
        raise RuntimeError(f"rmqtool dump commitlog: status {rc}: {err.strip()}")
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    if lines and lines[-1].get("type") == "summary":  # the verdict, last (schema_version 2)
        lines.pop()
    return rc, lines


def dump_queues(store: Path, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``rmqtool dump consumequeue --format jsonl`` as the view's ``consume_queues``
    (entries with status OK only; min/max as the broker reports them)."""
    rc, out, err = rmq(["dump", "consumequeue", str(store), "--format", "jsonl", *geometry_args(config)])
    if rc not in (0, 4):
        raise RuntimeError(f"rmqtool dump consumequeue: status {rc}: {err.strip()}")
    qs: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        if not line.strip():
            continue
        u = json.loads(line)
        if u.get("type", "unit") not in ("unit", "cq_unit", "entry") and "queue_offset" not in u:
            continue
        q = qs.setdefault(f"{u['topic']}/{u['queue_id']}", {"entries": []})
        if u.get("status", "OK") in ("OK", "FILL_BLANK"):  # the broker lists its fill-blank units too
            q["entries"].append(
                {
                    "cq_offset": u["queue_offset"],
                    "phys_offset": u["commitlog_offset"],
                    "size": u["size"],
                    "tags_code": u["tags_code"],
                }
            )
    for q in qs.values():
        es = q["entries"]
        q["min_offset"] = es[0]["cq_offset"] if es else 0
        q["max_offset"] = es[-1]["cq_offset"] + 1 if es else 0
    return qs


def key_lookups(
    store: Path, config: dict[str, Any], queries: list[tuple[str, str]]
) -> dict[tuple[str, str], list[int]]:
    """The broker's ``queryMessage(topic, key, 64, 0, Long.MAX_VALUE)`` physical offsets, by
    rmqtool's index walk (the code behind ``dump --key``)."""
    from rmqtool.recovery import query as qy
    from rmqtool.recovery.store import Store

    st = Store.open(
        store,
        config.get("mappedFileSizeCommitLog"),
        config.get("mappedFileSizeConsumeQueue"),
        config.get("maxHashSlotNum"),
        config.get("maxIndexNum"),
    )
    size = int(config.get("mappedFileSizeCommitLog") or st.geometry.commitlog_file_size)
    return {
        (t, k): sorted(
            stored_phys(store, size, h.commitlog_offset)
            for h in qy.index_query(st, t, k, max_num=qy.MAX_MSGS_NUM_BATCH)
        )
        for t, k in queries
    }


def stored_phys(store: Path, size: int, pos: int) -> int:
    """The PHYSICALOFFSET field of the record at commitlog offset POS: what the broker's
    queryMessage reports for a hit (MessageExt.getCommitLogOffset of the decoded record),
    which is POS unless damage changed the field (oracle soak seed 21514)."""
    f = store / "commitlog" / f"{pos - pos % size:020d}"
    try:
        with open(f, "rb") as fh:
            fh.seek(pos % size + 28)
            raw = fh.read(8)
    except OSError:
        return pos
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else pos


def file_digests(store: Path, prefixes: tuple[str, ...] = ("commitlog/", "consumequeue/")) -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted(store.rglob("*")):
        rel = p.relative_to(store).as_posix()
        if p.is_file() and rel.startswith(prefixes):
            out[rel] = {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    return out


def index_digests(store: Path) -> list[dict[str, Any]]:
    d = store / "index"
    if not d.is_dir():
        return []
    return [
        {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in sorted(d.iterdir())
        if p.is_file()
    ]


# ---------------------------------------------------------------------------------------
# comparisons (each returns disagreements, one line each)


def _records_in_view(view: dict[str, Any]) -> list[dict[str, Any]]:
    return list(view.get("commitlog_records") or [])


def host_text(java: Any) -> Any:
    """A host as rmqtool prints it, from the broker's text: Java's getHostAddress writes every
    IPv6 group (2001:db8:0:0:0:0:0:10), rmqtool the RFC 5952 short form (2001:db8::10), a
    deliberate difference (man rmqtool-dump, born_host); IPv4 is the same."""
    import ipaddress

    if not isinstance(java, str) or not java.startswith("["):
        return java
    addr, _, port = java[1:].partition("]:")
    try:
        return f"[{ipaddress.IPv6Address(addr.split('%')[0])}]:{port}"
    except ValueError:
        return java


# the harness names transaction types by MessageSysFlag's constants (TRANSACTION_COMMIT_TYPE),
# rmqtool dump by the short names of its man page (COMMIT): the same four values
TX_NAMES = {"NOT_TYPE": "NOT_TYPE", "PREPARED_TYPE": "PREPARED", "COMMIT_TYPE": "COMMIT", "ROLLBACK_TYPE": "ROLLBACK"}


def _where(r: dict[str, Any]) -> int | None:
    try:
        return int(r["file"]) + int(r["pos"])
    except (KeyError, TypeError, ValueError):
        return r.get("physical_offset")


def compare_dump(view: dict[str, Any], ours: list[dict[str, Any]], limit: int = 5) -> list[str]:
    """Every record the broker parsed, field for field, and no other intact record between
    its min and max offsets."""
    bad: list[str] = []
    # by position (file base + pos): physical_offset is the field as stored, which damage changes
    by_off = {_where(r): r for r in ours if _where(r) is not None}
    theirs = _records_in_view(view)
    for exp in theirs:
        off = exp["phys_offset"]
        r = by_off.get(off)
        if r is None:
            bad.append(f"dump: no record at {off} (broker: {exp.get('topic')} size {exp.get('size')})")
        elif exp.get("blank_end_of_file_record"):
            if r.get("type") != "blank" or r.get("total_size") != exp.get("blank_total_size_field"):
                bad.append(
                    f"dump: {off}: broker BLANK of {exp.get('blank_total_size_field')}, rmqtool {r.get('type')} {r.get('total_size')}"
                )
        else:
            if r.get("type") != "message":
                bad.append(f"dump: {off}: broker message, rmqtool {r.get('type')} {r.get('status')}")
            else:
                for tn, on in RECORD_FIELDS.items():
                    if tn == "phys_offset" and exp.get(tn) == _where(r):
                        continue  # (the view's phys_offset is the record's place; dump's physical_offset the stored field)
                    if tn in ("born_host", "store_host") and tn in exp and host_text(exp[tn]) == r.get(on):
                        continue
                    if tn == "transaction_type" and TX_NAMES.get(exp.get(tn), exp.get(tn)) == r.get(on):
                        continue
                    if tn in exp and r.get(on) != exp[tn]:
                        bad.append(f"dump: {off}: {tn} broker {exp[tn]!r} rmqtool {r.get(on)!r}")
                if "keys" in exp and (r.get("properties") or {}).get("KEYS") != exp["keys"]:
                    bad.append(
                        f"dump: {off}: keys broker {exp['keys']!r} rmqtool {(r.get('properties') or {}).get('KEYS')!r}"
                    )
        if len(bad) >= limit:
            return bad + ["dump: ..."]
    lo, hi = view.get("commitlog_min_offset", 0), view.get("commitlog_max_offset", 0)
    want = {e["phys_offset"] for e in theirs}
    if theirs:
        # the view's record list may end before the broker's end offset (it walks with the
        # CRC on where checkCRCOnRecover=false let the broker's recovery go on): only the
        # range it lists is compared for records it lacks
        hi = min(hi, max(e["phys_offset"] + max(e.get("size") or 0, 1) for e in theirs))
    extra = sorted(
        o for o, r in by_off.items() if lo <= o < hi and r.get("status") in ("OK", "BLANK") and o not in want
    )
    if extra and theirs:
        bad.append(f"dump: intact records the broker did not parse in [{lo}, {hi}): {extra[:5]}")
    return bad


def compare_queues(view: dict[str, Any], ours: dict[str, dict[str, Any]], what: str = "cq") -> list[str]:
    bad = []
    theirs = view.get("consume_queues") or {}
    for key, q in sorted(theirs.items()):
        te = [(e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in q.get("entries", [])]
        mine = ours.get(key, {"entries": [], "min_offset": 0, "max_offset": 0})
        oe = [(e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in mine["entries"]]
        # fill-blank units below the broker's minimum offset: the dispatch that writes them
        # (ConsumeQueue.fillPreBlank, a queue's first unit at a queue offset > 0) also moves
        # the broker's in-memory minimum past them; at its next start (correctMinOffset) it
        # counts them again (oracle soak seed 20055). The bytes are the same either way.
        lo = q.get("min_offset") or 0
        oe = [x for x in oe if not (x[0] < lo and x[1:] == FILL_BLANK)]
        if (
            te != oe
            and te
            and q.get("max_offset") == mine.get("max_offset")
            and te[-1][0] + 1 < (q.get("max_offset") or 0)
            and oe[: len(te)] == te
        ):
            # the view lists a queue only up to its first missing file (getIndexBuffer has
            # nothing there), while the broker's queue goes on to its max offset after the
            # hole, as rmqtool's does (oracle soak seed 20590): equal as far as listed, same end
            continue
        if te != oe:
            diff = next((i for i, (a, b) in enumerate(zip(te, oe)) if a != b), min(len(te), len(oe)))
            bad.append(
                f"{what}: {key}: {len(te)} broker entries, {len(oe)} rmqtool; first difference at #{diff}: "
                f"broker {te[diff] if diff < len(te) else None} rmqtool {oe[diff] if diff < len(oe) else None}"
            )
        elif te and (q.get("max_offset") != mine["max_offset"]):
            bad.append(f"{what}: {key}: max_offset broker {q.get('max_offset')} rmqtool {mine['max_offset']}")
    for key, mine in sorted(ours.items()):
        if key not in theirs and mine["entries"]:
            bad.append(f"{what}: {key}: {len(mine['entries'])} rmqtool entries, no such queue in the broker")
    return bad


FILL_BLANK = (0, 2**31 - 1, 0)


def compare_queues_superset(view: dict[str, Any], ours: dict[str, dict[str, Any]], what: str) -> list[str]:
    """Every entry the broker has (fill-blank units aside) is in rmqtool's queue, unchanged:
    for stores that lost consume queue files, which the broker's start does not dispatch
    again and rebuild-index does (by design)."""
    bad = []
    for key, q in sorted((view.get("consume_queues") or {}).items()):
        mine = {
            e["cq_offset"]: (e["phys_offset"], e["size"], e["tags_code"])
            for e in ours.get(key, {"entries": []})["entries"]
        }
        for e in q.get("entries", []):
            t = (e["phys_offset"], e["size"], e["tags_code"])
            msg = e.get("message") or {}
            if (
                e.get("consistent") is False
                and msg.get("queue_offset") is not None
                and mine.get(msg["queue_offset"]) == t
            ):
                # the broker's unit sits at the wrong queue offset: a normal start after a
                # crash (no abort file) does not dispatch the records the reput had not
                # reached, and the next dispatched record of the queue goes to the first free
                # unit (putMessagePositionInfo only logs the gap); rebuild-index puts it at
                # its record's queue offset (oracle soak seed 20019)
                continue
            if t != FILL_BLANK and mine.get(e["cq_offset"]) != t:
                bad.append(f"{what}: {key}: broker entry {e['cq_offset']} {t}, rmqtool {mine.get(e['cq_offset'])}")
                break
    return bad


def view_queries(view: dict[str, Any]) -> list[tuple[str, str]]:
    return [(q["topic"], q["key"]) for q in view.get("query_message_by_key") or []]


def their_offsets(q: dict[str, Any]) -> list[int]:
    """The offsets the broker's queryMessage returned, duplicates kept when the view has
    them (a message whose KEYS names a key twice is indexed twice)."""
    return sorted(q["phys_offsets_raw"] if "phys_offsets_raw" in q else q["phys_offsets"])


def compare_lookups(
    view: dict[str, Any], ours: dict[tuple[str, str], list[int]], what: str, superset: bool = False, limit: int = 5
) -> list[str]:
    """Key lookups equal (superset=True: rmqtool's hits include the broker's; extra hits are
    only allowed for records that are in the broker's recovered commitlog)."""
    bad = []
    recs = {r["phys_offset"] for r in _records_in_view(view)}
    for q in view.get("query_message_by_key") or []:
        t, k = q["topic"], q["key"]
        theirs, mine = their_offsets(q), ours.get((t, k), [])
        if "phys_offsets_raw" not in q:
            mine = sorted(set(mine))
        if superset:
            missing = sorted(set(theirs) - set(mine))
            stray = sorted(o for o in set(mine) - set(theirs) if o not in recs)
            if missing or stray:
                bad.append(f"{what}: key {t}#{k}: broker {theirs}, rmqtool {mine}")
        elif mine != theirs:
            bad.append(f"{what}: key {t}#{k}: broker {theirs}, rmqtool {mine}")
        if len(bad) >= limit:
            return bad + [f"{what}: ..."]
    return bad


def compare_files(theirs: dict[str, Any], ours: dict[str, Any], prefix: str, what: str) -> list[str]:
    t = {k: (v["size"], v["sha256"]) for k, v in theirs.items() if k.startswith(prefix)}
    o = {k: (v["size"], v["sha256"]) for k, v in ours.items() if k.startswith(prefix)}
    if t == o:
        return []
    bad = []
    for k in sorted(set(t) | set(o)):
        if t.get(k) != o.get(k):
            bad.append(f"{what}: {k}: broker {t.get(k, 'absent')} rmqtool {o.get(k, 'absent')}"[:200])
    return bad[:5]


def logical_end_in_file(view: dict[str, Any], rel: str, size: int) -> int | None:
    """Where the data the broker considers written ends inside the file REL (commitlog: its
    max offset; a consume queue file: its max logical offset), clamped to the file."""
    parts = rel.split("/")
    try:
        base = int(parts[-1])
    except ValueError:
        return None
    if parts[0] == "commitlog":
        end = view.get("commitlog_max_offset")
    elif parts[0] == "consumequeue" and len(parts) == 4:
        q = (view.get("consume_queues") or {}).get(f"{parts[1]}/{parts[2]}")
        end = q["max_offset"] * 20 if q else 0
    else:
        return None
    if end is None:
        return None
    return max(0, min(size, end - base))


def compare_files_zeroed(
    theirs: dict[str, Any],
    ours_root: Path,
    orig_root: Path,
    view: dict[str, Any],
    prefix: str,
    what: str,
    skip_queues: set[str] = frozenset(),
) -> list[str]:  # type: ignore[assignment]
    """Files rmqtool wrote against the broker's (sha256 only): equal, or equal but for the
    bytes after the logical end, which rmqtool zero-fills and the broker leaves as they were
    in the input store (man rmqtool-recover, Deviations; man rmqtool-rebuild-index): then
    the broker's hash must be exactly that of rmqtool's bytes up to the end followed by the
    input's bytes after it."""
    ours = file_digests(ours_root, (prefix,))

    def keep(k: str) -> bool:
        return k.startswith(prefix) and "/".join(k.split("/")[1:3]) not in skip_queues

    t = {k: (v["size"], v["sha256"]) for k, v in theirs.items() if keep(k)}
    o = {k: (v["size"], v["sha256"]) for k, v in ours.items() if keep(k)}
    bad = []
    for k in sorted(set(t) | set(o)):
        if t.get(k) == o.get(k):
            continue
        if k in t and k in o and t[k][0] == o[k][0] and (orig_root / k).is_file():
            mine, orig = (ours_root / k).read_bytes(), (orig_root / k).read_bytes()
            cut = logical_end_in_file(view, k, len(mine))
            if cut is not None and len(orig) >= len(mine) and not any(mine[cut:]):
                hybrid = mine[:cut] + orig[cut : len(mine)]
                if hashlib.sha256(hybrid).hexdigest() == t[k][1]:
                    continue
        bad.append(f"{what}: {k}: broker {t.get(k, 'absent')} rmqtool {o.get(k, 'absent')}"[:200])
    return bad[:5]


def verify_outlook(report: dict[str, Any]) -> dict[str, Any]:
    rec = (report.get("summary") or {}).get("recovery") or {}
    mode = rec.get("mode")
    side = rec.get(mode) or {} if mode else {}
    stop = side.get("stop_offset")
    if not side and rec.get("commitlog_min_offset") == -1:
        stop = rec.get("data_end")  # no commitlog file: no walk, the outlook is the empty end (0)
    return {"mode": mode, "stop_offset": stop, "loads": rec.get("loads"), "load_blockers": rec.get("load_blockers")}


def view_mode(view: dict[str, Any]) -> str:
    m = str(view.get("recovery_mode", ""))
    return "abnormal" if m.startswith("abnormal") else "normal"


def prop_crc_cut(view: dict[str, Any], report: dict[str, Any], config: dict[str, Any]) -> bool:
    """forceVerifyPropCRC=true (5.2+, off by default) is not modelled by rmqtool (man
    rmqtool-recover, Deviations): such a broker cuts at a record whose __CRC32# property
    fails even when its body CRC holds, where rmqtool's walk goes on. True when the broker's
    cut is exactly at a record verify reports as CL_PROP_CRC."""
    if not config.get("forceVerifyPropCRC"):
        return False
    end = view.get("commitlog_max_offset")
    return any(f.get("code") == "CL_PROP_CRC" and f.get("physical_offset") == end for f in report.get("findings") or [])


def compare_verify(
    view: dict[str, Any], rc: int, report: dict[str, Any], lost_acked: int | None, config: dict[str, Any] | None = None
) -> list[str]:
    bad = []
    o = verify_outlook(report)
    if prop_crc_cut(view, report, config or {}):
        return [] if rc == 4 else [f"verify: status {rc} with CL_PROP_CRC where a forceVerifyPropCRC broker cuts"]
    loaded = view.get("load_ok", True)
    if o["loads"] is not None and bool(o["loads"]) != bool(loaded):
        bad.append(f"verify: outlook loads={o['loads']} ({o['load_blockers']}), broker load_ok={loaded}")
    if not loaded:
        return bad
    if o["mode"] != view_mode(view):
        bad.append(f"verify: outlook mode {o['mode']}, broker ran {view.get('recovery_mode')}")
    # (verify is given checkCRCOnRecover and messageIndexSafe as the broker was: its outlook
    # walks on past a record whose body CRC fails where the broker's does, and so ends
    # where the broker's recovery ended)
    want = view.get("commitlog_max_offset")
    if o["stop_offset"] != want:
        bad.append(f"verify: outlook stop offset {o['stop_offset']}, broker's recovery ended at {want}")
    torn = any(
        f.get("code") == "CL_TORN_TAIL" and f.get("physical_offset") == view.get("commitlog_max_offset")
        for f in report.get("findings") or []
    )
    if lost_acked and rc == 0 and not torn:
        # (a last record torn at the broker's cut after a crash is what a kill mid-write
        # leaves: CL_TORN_TAIL, a warning by design, man rmqtool-verify; the bytes cannot say
        # whether the writer had been told it was stored)
        bad.append(f"verify: status 0, but the broker's recovery lost {lost_acked} acknowledged message(s)")
    if rc not in (0, 4):
        bad.append(f"verify: status {rc}")
    return bad


# ---------------------------------------------------------------------------------------
# the comparison of rmqtool's view with a recorded broker view (fixtures/real, or a case)


def rmqtool_read_only_checks(
    store: Path, version: str, config: dict[str, Any], view: dict[str, Any], lost_acked: int | None = None
) -> dict[str, list[str]]:
    """``dump`` and ``verify`` of STORE (never written) against the broker's view of it."""
    out: dict[str, list[str]] = {}
    _rc, recs = dump_records(store, version, config)
    out["dump"] = compare_dump(view, recs)
    rc, txt, err = rmq(
        [
            "verify",
            str(store),
            "--format",
            "json",
            "-q",
            "--broker-version",
            rmq_version(version),
            *geometry_args(config),
            *walk_args(config),
        ]
    )
    try:
        report = json.loads(txt)
    except ValueError:
        out["verify"] = [f"verify: status {rc}, no JSON report: {err.strip()[:200]}"]
    else:
        end = view.get("commitlog_max_offset")
        at_cut = next((r for r in recs if _where(r) == end and r.get("type") == "message"), None)
        if (
            config.get("forceVerifyPropCRC")
            and at_cut is not None
            and "__CRC32#" not in (at_cut.get("properties") or {})
        ):
            # the same unmodelled setting (man rmqtool-recover, Deviations): such a broker also
            # cuts at a record whose __CRC32# property is gone (a flipped bit in its name, seed
            # 30167); rmqtool walks on, and verify has no finding for a missing one (open)
            out["verify"] = []
            out["_prop_crc_cut"] = []
            return out
        out["verify"] = compare_verify(view, rc, report, lost_acked, config)
        if prop_crc_cut(view, report, config):
            out["_prop_crc_cut"] = []
    return out


REFUSE_COMMANDS = (["verify"], ["recover", "--dry-run"], ["rebuild-index", "--dry-run"], ["repair", "--dry-run"])


def refusal_checks(store: Path, version: str, config: dict[str, Any], work: Path) -> list[str]:
    """A broker.conf with duplicationEnable=true (the setting the oracle cannot run: see
    gen_scenario): every command that reads recovery settings refuses the store with exit 8
    and one line naming the setting, and changes nothing."""
    conf = work / "duplication.conf"
    conf.write_text(
        "duplicationEnable=true\n"
        + "".join(
            f"{k}={v}\n"
            for k, v in config.items()
            if k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")
        ),
        encoding="utf-8",
    )
    before = file_digests(store, ("",))
    bad = []
    for cmd in REFUSE_COMMANDS:
        rc, out, err = rmq(
            [cmd[0], str(store), *cmd[1:], "--broker-config", str(conf), "--broker-version", rmq_version(version), "-q"]
        )
        if rc != 8 or "duplicationEnable" not in err + out:  # (verify names it in its report's UNSUPPORTED_SETTING)
            bad.append(
                f"refuse: {' '.join(cmd)} with duplicationEnable=true: status {rc} (want 8): {err.strip()[-160:]}"
            )
    if file_digests(store, ("",)) != before:
        bad.append("refuse: the store changed although every command refused it")
    return bad


def walk_args(config: dict[str, Any]) -> list[str]:
    """checkCRCOnRecover and messageIndexSafe as options (recover, and verify's outlook)."""
    args = []
    if config.get("checkCRCOnRecover") is False:
        args.append("--no-crc")
    if config.get("messageIndexSafe"):
        args.append("--message-index-safe")
    return args


def recover_args(version: str, config: dict[str, Any], extra: list[str] = ()) -> list[str]:  # type: ignore[assignment]
    args = ["--broker-version", rmq_version(version), *geometry_args(config), "-q", "-j", "1", "--format", "json"]
    return args + walk_args(config) + list(extra)


QUEUE_GAP = "the broker serves the units after the gap from the wrong file"


def queue_gap_left(rc: int, msg: str) -> bool:
    """Whether recover's status 4/5 says only that a consume queue lacks a middle file:
    the broker loads such a queue gap and all, and recover, as the broker, leaves the gap
    and names it a problem (issue 33 R13; man rmqtool-recover, EXIT STATUS); the recovered
    store is then compared as any other."""
    lines = [ln for ln in msg.splitlines() if ln.startswith("rmqtool: problem:")]
    return rc in (4, 5) and bool(lines) and all(QUEUE_GAP in ln for ln in lines)


def run_recover(store: Path, version: str, config: dict[str, Any], extra: list[str] = ()) -> tuple[int, str]:  # type: ignore[assignment]
    bk = store.parent / (store.name + ".bk")
    rc, out, err = rmq(["recover", "--yes", str(store), "--backup-dir", str(bk), *recover_args(version, config, extra)])
    return rc, (err.strip() or out[-300:])


def zero_head_allowed(
    view: dict[str, Any], ours: dict[str, dict[str, Any]], store: Path, config: dict[str, Any]
) -> dict[str, Any]:
    """The broker's truncateDirtyLogicFiles (run at start when a queue reaches the
    commitlog's end) takes the first unit of a queue's last file as written without
    checking it, so a queue file a crash left all zeros (created, its first unit not
    written yet: oracle soak seed 5131) is one unit (0, 0, 0) long in that broker's
    memory, until its next start's queue recovery finds it empty. rmqtool leaves the same
    bytes and calls the queue empty (man rmqtool-recover, Deviations). A copy of VIEW
    without exactly such units: the broker's last entry, (0, 0, 0), the first unit of a
    file, absent from rmqtool's queue, and 20 zero bytes (or no file) in STORE there."""
    size = int(config.get("mappedFileSizeConsumeQueue", 300000 * 20))
    out = None
    for key, q in (view.get("consume_queues") or {}).items():
        es = q.get("entries") or []
        if not es:
            continue
        e = es[-1]
        pos = e["cq_offset"] * 20
        if (e["phys_offset"], e["size"], e["tags_code"]) != (0, 0, 0) or pos % size:
            continue
        if any(m["cq_offset"] == e["cq_offset"] for m in ours.get(key, {"entries": []})["entries"]):
            continue
        topic, _, qid = key.rpartition("/")
        f = store / "consumequeue" / topic / qid / f"{pos - pos % size:020d}"
        if f.is_file() and any(f.read_bytes()[:20]):
            continue
        out = out or dict(view, consume_queues=dict(view.get("consume_queues") or {}))
        rest = es[:-1]
        out["consume_queues"][key] = dict(q, entries=rest, max_offset=rest[-1]["cq_offset"] + 1 if rest else 0)
    return out or view


def recovered_checks(
    store: Path, version: str, config: dict[str, Any], view: dict[str, Any], superset_keys: bool
) -> list[str]:
    """STORE as rmqtool left it after recover, against the broker's view after its own
    recovery of the same input: end offset, consume queues, key lookups."""
    bad = []
    _rc, recs = dump_records(store, version, config)
    intact = [r for r in recs if r.get("status") in ("OK", "BLANK") and r.get("type") in ("message", "blank")]
    # (by position: the stored PHYSICALOFFSET field is what damage may have changed, seed 20607)
    end = max((_where(r) + r["total_size"] for r in intact if r.get("type") == "message"), default=None)
    theirs_msgs = [r for r in _records_in_view(view) if not r.get("blank_end_of_file_record")]
    t_end = max((r["phys_offset"] + r["size"] for r in theirs_msgs), default=None)
    if theirs_msgs and end != t_end and end != view.get("commitlog_max_offset"):
        bad.append(f"recover: last record ends at {end}, broker's at {t_end}")
    ours = dump_queues(store, config)
    bad += compare_queues(zero_head_allowed(view, ours, store, config), ours, "recover cq")
    bad += compare_lookups(view, key_lookups(store, config, view_queries(view)), "recover keys", superset=superset_keys)
    return bad


def q1_allowed(view: dict[str, Any], ours: dict[str, dict[str, Any]], version: str) -> dict[str, Any]:
    """Quirk Q1 (RECOVERY.md; man rmqtool-recover --correct-delay-tags): 4.9.2-4.9.8 parse
    the delay table after recover(), so units of SCHEDULE_TOPIC_XXXX that abnormal recovery
    dispatches carry the TAGS hash (or 0) instead of the delivery time. rebuild-index writes
    the delivery time, as the broker's reput does. A copy of VIEW in which exactly such units
    take rmqtool's tagsCode (any other difference stays)."""
    from rmqtool.formats.javahash import java_hash

    if view_mode(view) != "abnormal" or not ((4, 9, 2) <= _vt(version) < (5, 0, 0)):
        return view
    tags = {r["phys_offset"]: r.get("tags") for r in _records_in_view(view)}
    out = dict(view, consume_queues=dict(view.get("consume_queues") or {}))
    for key, q in out["consume_queues"].items():
        if not key.startswith("SCHEDULE_TOPIC_XXXX/"):
            continue
        mine = {e["cq_offset"]: e for e in ours.get(key, {"entries": []})["entries"]}
        es = []
        for e in q.get("entries", []):
            m = mine.get(e["cq_offset"])
            t = tags.get(e["phys_offset"])
            quirk = java_hash(t) if t else 0
            if m and (m["phys_offset"], m["size"]) == (e["phys_offset"], e["size"]) and e["tags_code"] == quirk:
                e = dict(e, tags_code=m["tags_code"])
            es.append(e)
        out["consume_queues"][key] = dict(q, entries=es)
    return out


def rebuild_checks(
    recovered: Path,
    version: str,
    config: dict[str, Any],
    view: dict[str, Any],
    work: Path,
    exact_index: bool,
    queues_lost: bool = False,
    original: Path | None = None,
) -> list[str]:
    """rebuild-index on a copy of the recovered store without consumequeue/ and index/
    (ORIGINAL: the store the broker viewed, default RECOVERED)."""
    original = original or recovered
    cp = work / "rebuilt"
    shutil.rmtree(cp, ignore_errors=True)
    shutil.copytree(recovered, cp, ignore=shutil.ignore_patterns("consumequeue", "index"))
    (cp / "consumequeue").mkdir()
    (cp / "index").mkdir()
    rc, out, err = rmq(
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
            rmq_version(version),
            *geometry_args(config),
        ]
    )
    if rc not in (0, 1):  # 1: files were written
        return [f"rebuild: status {rc}: {err.strip()[:200]}"]
    ours_q = dump_queues(cp, config)
    # (q1: the queues whose files may differ from the broker's in exactly what was allowed)
    v0, view = view, q1_allowed(zero_head_allowed(view, ours_q, recovered, config), ours_q, version)
    q1 = {k for k, q in (view.get("consume_queues") or {}).items() if q is not (v0.get("consume_queues") or {}).get(k)}
    if queues_lost:
        bad = compare_queues_superset(view, ours_q, "rebuild cq")
    else:
        bad = compare_queues(view, ours_q, "rebuild cq")
        # the files of queues with quirk-Q1 units differ in exactly those units' tagsCode,
        # which the entry comparison above allowed
        files = view.get("files_after_rocketmq_shutdown") or {}
        if files:
            bad += compare_files_zeroed(files, cp, original, view, "consumequeue/", "rebuild cq file", q1)
    # after a crash the broker's index may hold a record twice (its recovery indexes again
    # what the reput had indexed: RECOVERY Q6), and lost index files hold nothing: a fresh
    # rebuild then finds each hit once, and more
    if rmq_version(version) != version:
        # a release after rmqtool's range (it may index differently, as 5.4.0 began to
        # index each message's TAGS): the index bytes are not compared
        exact_index = False
    theirs = [(d["size"], d["sha256"]) for d in view.get("index_files_after_rocketmq_shutdown_in_name_order") or []]
    mine = [(d["size"], d["sha256"]) for d in index_digests(cp)]
    if exact_index and len(theirs) < len(mine):
        # the broker names a new index file by its wall clock in ms: a file that fills within
        # the millisecond its predecessor was made gets the same name, the broker maps that
        # file again and overwrites its entries, and loses keys (tiny maxIndexNum); rmqtool's
        # names are unique (man rmqtool-rebuild-index): it keeps them, and has more files
        exact_index = False
    bad += compare_lookups(view, key_lookups(cp, config, view_queries(view)), "rebuild keys", superset=not exact_index)
    if exact_index and "index_files_after_rocketmq_shutdown_in_name_order" in view and theirs != mine:
        bad.append(
            f"rebuild index files: broker {len(theirs)} files, rmqtool {len(mine)}; "
            f"first differing #{next((i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b), min(len(theirs), len(mine)))}"
        )
    return bad


# keys of a broker view that are a deterministic function of the store (compared on reopen)
REOPEN_SAME = ("commitlog_min_offset", "commitlog_max_offset", "commitlog_records", "consume_queues")
REOPEN_UNLOADED = "reopen: the broker does not load the store rmqtool recovered"


def reopen_records(before: dict[str, Any], after: dict[str, Any], mode_hint: str = "") -> list[str]:
    """What every reopen comparison checks first, on a store the broker loaded: a normal
    start, the same commitlog min/max offsets and the same records."""
    bad = []
    if view_mode(after) != "normal":
        bad.append(f"reopen: the broker ran {after.get('recovery_mode')} recovery on the recovered store{mode_hint}")
    for k in ("commitlog_min_offset", "commitlog_max_offset"):
        if before.get(k) != after.get(k):
            bad.append(f"reopen: {k} {before.get(k)} after the broker's own recovery, {after.get(k)} after rmqtool's")
    if before.get("commitlog_records") != after.get("commitlog_records"):
        b = {r["phys_offset"]: r for r in before.get("commitlog_records") or []}
        a = {r["phys_offset"]: r for r in after.get("commitlog_records") or []}
        diff = sorted(o for o in set(a) | set(b) if a.get(o) != b.get(o))
        bad.append(f"reopen: commitlog records differ at {diff[:5]} ({len(diff)})")
    return bad


def compare_reopen(
    before: dict[str, Any], after: dict[str, Any], recovered: Path | None = None, original: Path | None = None
) -> list[str]:
    """The broker's view of the store rmqtool recovered against its view of the original
    after its own recovery: the same records, offsets, consume queues and commitlog /
    consumequeue bytes; key lookups: the same or more (rmqtool keeps intact index files the
    broker deletes after a crash and re-indexes what they held: man rmqtool-recover)."""
    if not after.get("load_ok", True):
        return [REOPEN_UNLOADED]
    bad = reopen_records(before, after, " (abort left?)")
    # queues the broker's start on rmqtool's store extends with units its own start never
    # writes: a record that lost its unit (its queue file gone) and lies below the end of
    # stale units the broker leaves on disk past its end (it only moves its write position;
    # rmqtool zero-fills them, man rmqtool-recover, Deviations), which keep its reput's
    # start past that record at every start (oracle soak seed 21892). Exactly that: the
    # same entries, then only consistent ones, for records the broker has
    recs = {r["phys_offset"] for r in before.get("commitlog_records") or []}
    grown: set[str] = set()
    aq = dict(after.get("consume_queues") or {})
    for key, q in aq.items():
        bq = (before.get("consume_queues") or {}).get(key) or {"entries": [], "max_offset": 0}
        be, ae = bq.get("entries") or [], q.get("entries") or []
        if (
            len(ae) > len(be)
            and ae[: len(be)] == be
            and all(e.get("consistent") and e["phys_offset"] in recs for e in ae[len(be) :])
        ):
            grown.add(key)
            aq[key] = dict(q, entries=be, max_offset=bq.get("max_offset"))
        elif (
            len(ae) < len(be)
            and be[: len(ae)] == ae
            and all(e["phys_offset"] >= (before.get("commitlog_max_offset") or 0) for e in be[len(ae) :])
        ):
            # units past the commitlog's end that the broker's abnormal recovery wrote from a
            # record whose PHYSICALOFFSET field is damaged: its next start cuts them, on its
            # own store as on rmqtool's (oracle soak seed 30064, 4.7.1: two starts, checked)
            grown.add(key)
            aq[key] = dict(q, entries=be, max_offset=bq.get("max_offset"))
    bad += [s.replace("rmqtool", "after rmqtool") for s in compare_queues(before, aq, "reopen cq")]
    fb, fa = before.get("files_after_rocketmq_shutdown") or {}, after.get("files_after_rocketmq_shutdown") or {}
    for prefix in ("commitlog/", "consumequeue/"):
        mine = file_digests(recovered, (prefix,)) if recovered is not None else {}
        if grown and prefix == "consumequeue/":
            skip = tuple(f"consumequeue/{k}/" for k in grown)
            fa = {k: v for k, v in fa.items() if not k.startswith(skip)}
            fb = {k: v for k, v in fb.items() if not k.startswith(skip)}
            mine = {k: v for k, v in mine.items() if not k.startswith(skip)}
        if recovered is not None and original is not None and compare_files(fa, mine, prefix, ""):
            bad.append(f"reopen: the broker changed {prefix} files of the store rmqtool recovered")
        if recovered is not None and original is not None:
            bad += compare_files_zeroed(fb, recovered, original, before, prefix, "reopen file", grown)
        else:
            bad += compare_files(fb, fa, prefix, "reopen file")
    fake = {(q["topic"], q["key"]): their_offsets(q) for q in after.get("query_message_by_key") or []}
    bad += compare_lookups(before, fake, "reopen keys", superset=True)
    return bad


# ---------------------------------------------------------------------------------------
# the broker oracle (the harness's command line)


class OracleError(RuntimeError):
    pass


@dataclass
class Oracle:
    script: Path
    timeout: float = 600.0
    _versions: list[str] | None = None

    def _run(self, args: list[str], timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        timeout = timeout or self.timeout
        try:
            return subprocess.run([str(self.script), *args], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise OracleError(f"rocketmq-oracle {args[0]}: timed out after {timeout:.0f} s") from exc

    def versions(self) -> list[str]:
        if self._versions is None:
            p = self._run(["versions"])
            if p.returncode != 0:
                raise OracleError(f"rocketmq-oracle versions: status {p.returncode}: {p.stderr.strip()[-300:]}")
            self._versions = [v.strip() for v in p.stdout.split() if v.strip()]
        return self._versions

    def write(self, version: str, scenario: dict[str, Any], out: Path) -> dict[str, Any]:
        out.mkdir(parents=True, exist_ok=True)
        sp = out / "scenario.json"
        sp.write_text(json.dumps(scenario), encoding="utf-8")
        p = self._run(["write", "--version", version, "--scenario", str(sp), "--out", str(out)])
        if p.returncode != 0:
            raise OracleError(f"rocketmq-oracle write: status {p.returncode}: {p.stderr.strip()[-400:]}")
        return json.loads((out / "result.json").read_text(encoding="utf-8"))

    def batch(self, version: str, jobs: list[dict[str, Any]], parallel: int = 1) -> list[dict[str, Any]]:
        """``rocketmq-oracle batch``: one JVM runs every job; one result object per job, in order."""
        if not jobs:
            return []
        fd, path = tempfile.mkstemp(prefix="oracle-jobs-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for j in jobs:
                    f.write(json.dumps(j, ensure_ascii=False) + "\n")
            p = self._run(
                ["batch", "--version", version, "--parallel", str(parallel), path],
                timeout=self.timeout + 120.0 * len(jobs) / max(1, parallel),
            )
        finally:
            os.unlink(path)
        outs = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
        if len(outs) != len(jobs):
            raise OracleError(
                f"rocketmq-oracle batch: status {p.returncode}, {len(outs)} results for {len(jobs)} jobs: "
                f"{p.stderr.strip()[-400:]}"
            )
        return outs

    def view(self, version: str, config: dict[str, Any], store: Path) -> dict[str, Any]:
        cp = store.parent / (store.name + ".viewconfig.json")
        cp.write_text(json.dumps(config), encoding="utf-8")
        p = self._run(["view", "--version", version, "--config", str(cp), str(store)])
        if p.returncode != 0:
            raise OracleError(f"rocketmq-oracle view: status {p.returncode}: {p.stderr.strip()[-400:]}")
        return json.loads(p.stdout)


def find_oracle(root: Path) -> Path | None:
    """tests/oracle/rocketmq-oracle of this repository, else $RMQ_ORACLE."""
    here = root / "tests" / "oracle" / "rocketmq-oracle"
    if here.is_file() and os.access(here, os.X_OK):
        return here
    env = os.environ.get("RMQ_ORACLE")
    if env and Path(env).is_file():
        return Path(env)
    return None


# ---------------------------------------------------------------------------------------
# scenarios

ODD_KEY_CHARS = "订单-ü#=:/%@!~$&*()[]{}'\",.;<>?|\\`^+é漢字🙂"
TOPICS = ["TopicA", "TopicB", "topic_c-1", "%RETRY%GroupX", "T" * 60, "Odd%Topic_9"]


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())


def _key(rng: random.Random) -> str:
    n = rng.randint(1, 24)
    if rng.random() < 0.5:
        return f"K{rng.randint(0, 40)}"  # shared keys: several hits per lookup
    return "".join(rng.choice(ODD_KEY_CHARS + "abcXYZ0123456789") for _ in range(n))


def gen_scenario(seed: int, version: str, *, max_messages: int = 120) -> dict[str, Any]:
    """A random scenario (the contract's scenario.json) plus ``damage`` (done in Python
    after the write). Deterministic in (seed, version)."""
    rng = random.Random(f"{seed}:{version}")
    brng = random.Random(f"{seed}:{version}:batch")  # (its own stream: the other fields of a seed stay as they were)
    v = _vt(version)
    cl = rng.choice([16384, 32768, 65536, 131072])
    config: dict[str, Any] = {
        "mappedFileSizeCommitLog": cl,
        "mappedFileSizeConsumeQueue": 20 * rng.choice([8, 16, 32, 300]),
        "maxHashSlotNum": rng.choice([4, 16, 100]),
        "maxIndexNum": rng.choice([10, 40, 400]),
        "checkCRCOnRecover": rng.random() < 0.85,
        "messageIndexSafe": rng.random() < 0.2,
        "flushDiskType": rng.choice(["ASYNC_FLUSH", "ASYNC_FLUSH", "SYNC_FLUSH"]),
        "maxMessageSize": cl // 2,
    }
    # duplicationEnable is not given to the broker: the reput then stops at the confirm
    # offset, which only an HA/controller setup advances, so a lone broker never dispatches
    # (the oracle's view would wait for a catch-up that does not come). rmqtool refuses the
    # setting (exit 8, man rmqtool-recover, BROKER CONFIGURATION): some cases check that
    # refusal instead ("refuse")
    probe_duplication = rng.random() < 0.2
    if v >= (5, 2, 0) and rng.random() < 0.3:
        config["enabledAppendPropCRC"] = True
        if rng.random() < 0.5:
            config["forceVerifyPropCRC"] = True
    n = rng.randint(1, max_messages)
    topics = rng.sample(TOPICS, rng.randint(1, 4))
    msgs: list[dict[str, Any]] = []
    prepared: list[int] = []
    t0 = 1795302151971 + rng.randint(0, 10**6)
    for i in range(n):
        topic = rng.choice(topics)
        m: dict[str, Any] = {"topic": topic, "queue_id": rng.randint(0, 3), "born_timestamp": t0 + i}
        r = rng.random()
        if r < 0.3:
            pass
        elif r < 0.7:
            m["keys"] = _key(rng)
        else:
            m["keys"] = " ".join(_key(rng) for _ in range(rng.randint(2, 12)))
        if rng.random() < 0.6:
            m["tags"] = rng.choice(["TagA", "TagB", "标签-ü", "t" * rng.randint(1, 40), "a||b"])
        if rng.random() < 0.3:
            m["properties"] = {f"p{j}-{rng.choice(['é', 'x', '='])}": _key(rng) for j in range(rng.randint(1, 4))}
        r = rng.random()
        if r < 0.08:
            m["body_len"] = 0
        elif r < 0.13:
            m["body_len"] = rng.randint(cl // 8, cl // 2 - 2048)
        else:
            m["body_len"] = rng.randint(1, 600)
        m["body_seed"] = rng.randint(0, 2**31)
        if rng.random() < 0.08:
            m["delay_level"] = rng.randint(1, 18)
        elif rng.random() < 0.08:
            m["transaction"] = "prepare"
            prepared.append(i)
        elif prepared and rng.random() < 0.1:
            m["transaction"] = rng.choice(["commit", "rollback"])
            m["prepared_seq"] = prepared.pop(rng.randrange(len(prepared)))
        if rng.random() < 0.15:
            m["born_host"] = rng.choice(["[::1]:40000", "[2001:db8::7]:5555", "[fe80::1]:1"])
        if rng.random() < 0.05:
            m["store_host"] = "[2001:db8::10]:10911"
        if rng.random() < 0.05:
            m["flag"] = rng.randint(1, 2**31 - 1)
        if (
            brng.random() < 0.06
            and not topic.startswith("%RETRY%")
            and "delay_level" not in m
            and "transaction" not in m
        ):
            # a client batch (DefaultMQProducer.send(Collection)): one putMessages, a record per message, each
            # with the batch's properties appended to its own (the client refuses retry topics and delays)
            m = {k: m[k] for k in ("topic", "queue_id", "born_timestamp", "born_host", "store_host") if k in m}
            m["batch"] = [
                {
                    "keys": _key(brng),
                    "tags": brng.choice(["TagA", "标签-ü"]),
                    "body_len": brng.randint(0, 300),
                    "body_seed": brng.randint(0, 2**31),
                }
                | ({"properties": {"b-é": _key(brng)}} if brng.random() < 0.3 else {})
                for _ in range(brng.randint(2, 6))
            ]
        msgs.append(m)
    if rng.random() < 0.6:
        end: dict[str, Any] = {"mode": "clean"}
    else:
        end = {"mode": "kill", "after_acks": rng.randint(0, n), "writers": rng.choice([1, 2])}
    damage = gen_damage(rng, end["mode"])
    return {
        "config": config,
        "messages": msgs,
        "end": end,
        "damage": damage,
        "seed": seed,
        "version": version,
        "probe_duplication": probe_duplication,
    }


DAMAGE_KINDS = [
    "bitflip",
    "zero_tail",
    "truncate_last",
    "remove_cq_file",
    "remove_index_file",
    "remove_abort",
    "add_abort",
    "zero_checkpoint",
    "remove_checkpoint",
]


def gen_damage(rng: random.Random, end_mode: str) -> list[dict[str, Any]]:
    if rng.random() < (0.5 if end_mode == "kill" else 0.35):
        return []
    out = []
    for _ in range(rng.choice([1, 1, 1, 2])):
        kind = rng.choice(DAMAGE_KINDS)
        out.append({"kind": kind, "r": rng.random(), "bit": rng.randint(0, 7), "n": rng.randint(1, 4096)})
    return out


def data_end(p: Path) -> int:
    """The length of the file without its trailing zeros."""
    b = p.read_bytes()
    return len(b.rstrip(b"\0"))


def flip_bit(p: Path, pos: int, bit: int) -> None:
    """Flip bit ``bit`` of the byte at ``pos`` of the file, in place."""
    with open(p, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << bit)]))


def zero_tail(p: Path, n: int) -> str:
    """Zero the last ``n`` bytes (at most all) before the file's trailing zeros; what was done."""
    end = data_end(p)
    n = min(n, end)
    with open(p, "r+b") as f:
        f.seek(end - n)
        f.write(b"\0" * n)
    return f"zero_tail {p.name} {end - n}..{end}"


STORE_DAMAGE = ("remove_cq_file", "remove_abort", "add_abort")  # kinds of any store, DLedger's too


def apply_damage(store: Path, damage: list[dict[str, Any]]) -> list[str]:
    """Damage the store in place (deterministic from the descriptors); what was done."""
    done = []
    cl = sorted((store / "commitlog").iterdir()) if (store / "commitlog").is_dir() else []

    for d in damage:
        k, r = d["kind"], d["r"]
        if k in ("bitflip", "zero_tail", "truncate_last") and cl:
            used = [p for p in cl if data_end(p) > 0]
            if not used:
                continue
            p = used[-1] if k != "bitflip" else used[int(r * len(used)) % len(used)]
            end = data_end(p)
            if k == "bitflip":
                pos = int(r * 1_000_003) % end
                flip_bit(p, pos, d["bit"])
                done.append(f"bitflip {p.name}@{pos} bit {d['bit']}")
            elif k == "zero_tail":
                done.append(zero_tail(p, d["n"]))
            else:
                size = max(0, end - d["n"])
                os.truncate(p, size)
                done.append(f"truncate {p.name} to {size}")
        elif k == "remove_cq_file":
            files = (
                sorted(x for x in (store / "consumequeue").rglob("*") if x.is_file())
                if (store / "consumequeue").is_dir()
                else []
            )
            if files:
                p = files[int(r * len(files)) % len(files)]
                p.unlink()
                done.append(f"rm {p.relative_to(store)}")
        elif k == "remove_index_file":
            files = sorted((store / "index").iterdir()) if (store / "index").is_dir() else []
            if files:
                p = files[int(r * len(files)) % len(files)]
                p.unlink()
                done.append(f"rm {p.relative_to(store)}")
        elif k == "remove_abort" and (store / "abort").exists():
            (store / "abort").unlink()
            done.append("rm abort")
        elif k == "add_abort" and not (store / "abort").exists():
            (store / "abort").write_bytes(b"")
            done.append("add abort")
        elif k == "zero_checkpoint" and (store / "checkpoint").exists():
            with open(store / "checkpoint", "r+b") as f:
                f.write(b"\0" * 24)
            done.append("zero checkpoint")
        elif k == "remove_checkpoint" and (store / "checkpoint").exists():
            (store / "checkpoint").unlink()
            done.append("rm checkpoint")
    return done


def harness_scenario(sc: dict[str, Any]) -> dict[str, Any]:
    """The part of a generated scenario the harness reads."""
    return {k: sc[k] for k in ("config", "messages", "end")}


# ---------------------------------------------------------------------------------------
# cases, end to end (in phases, so that one JVM per version and phase serves many cases)

CHECKS = ("write", "dump", "verify", "recover", "rebuild", "reopen", "refuse")


@dataclass
class CaseResult:
    seed: int
    version: str
    scenario: dict[str, Any]
    results: dict[str, list[str]] = field(default_factory=dict)  # check -> disagreements
    skipped: dict[str, str] = field(default_factory=dict)
    damage_done: list[str] = field(default_factory=list)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # where the case's time went (s)

    @property
    def ok(self) -> bool:
        return not any(self.results.values())

    def report(self) -> str:
        lines = [
            f"seed {self.seed} version {self.version} damage {self.damage_done} "
            f"(rerun: bench/oracle_soak.py --cases 1 --seed {self.seed} --versions {self.version} --keep)"
        ]
        for c, bad in self.results.items():
            lines += [f"  [{c}] {b}" for b in bad]
        lines.append("scenario: " + json.dumps(self.scenario, ensure_ascii=False))
        return "\n".join(lines)


def lost_acknowledged(result: dict[str, Any], view: dict[str, Any]) -> int:
    kept = {r["phys_offset"] for r in view.get("commitlog_records") or []}
    return sum(
        1
        for m in result.get("messages", [])
        if m.get("acknowledged", True)
        and m.get("put_status", "PUT_OK") == "PUT_OK"
        and m.get("phys_offset") is not None
        and m["phys_offset"] not in kept
    )


def lost_without_trace(store: Path, result: dict[str, Any], view: dict[str, Any], config: dict[str, Any]) -> bool:
    """Every acknowledged message the broker's recovery lost is all zeros in STORE (a tail
    zeroed from a record's start): no offline check can know of it, and verify's status 0
    is then the documented limit (man rmqtool-verify, DESCRIPTION), not a disagreement
    (oracle soak seed 20537). A message torn by the zeros is not this case
    (CL_ZEROED_RECORD_TAIL)."""
    kept = {r["phys_offset"] for r in view.get("commitlog_records") or []}
    size = int(config.get("mappedFileSizeCommitLog", 1 << 30))
    lost = [
        m
        for m in result.get("messages", [])
        if m.get("acknowledged", True)
        and m.get("put_status", "PUT_OK") == "PUT_OK"
        and m.get("phys_offset") is not None
        and m["phys_offset"] not in kept
    ]
    for m in lost:
        off, n = int(m["phys_offset"]), int(m.get("wrote_bytes") or 0)
        f = store / "commitlog" / f"{off - off % size:020d}"
        if not f.is_file():
            continue  # (a missing file: verify's layout findings say so)
        with open(f, "rb") as fh:
            fh.seek(off % size)
            if any(fh.read(n)):
                return False
    end = int(view.get("commitlog_max_offset") or 0)
    if lost and end % size:
        # the last record the broker kept must end as written (a zero last byte: the
        # zeros began inside it, which verify sees: CL_ZEROED_RECORD_TAIL, seed 5089)
        f = store / "commitlog" / f"{end - end % size:020d}"
        with open(f, "rb") as fh:
            fh.seek(end % size - 1)
            if fh.read(1) == b"\0":
                return False
    return bool(lost)


@dataclass
class _Case:
    res: CaseResult
    work: Path
    result: dict[str, Any] | None = None
    view: dict[str, Any] | None = None
    undamaged_clean: bool = False
    t: float = 0.0

    @property
    def config(self) -> dict[str, Any]:
        return self.res.scenario["config"]

    @property
    def store(self) -> Path:
        return self.work / "w" / "store"

    @property
    def rec(self) -> Path:
        return self.work / "rec" / "store"


def _timed(c: _Case, fn: Callable[[], Any]) -> Any:
    t0 = time.monotonic()
    try:
        return fn()
    finally:
        c.t += time.monotonic() - t0


def _checks_after_view(c: _Case, checks: tuple[str, ...]) -> bool:
    """dump, verify, recover, rebuild; True when the recovered store needs the broker's view."""
    view, res = c.view, c.res
    assert view is not None
    if not any((c.store / n).exists() for n in ("commitlog", "consumequeue", "index", "checkpoint")):
        # a writer killed before its first put, then checkpoint and abort removed: only the
        # lock is left, which the broker opens as a new store and rmqtool refuses as no store
        # (exit 8, man rmqtool-verify, EXIT STATUS): exactly that (oracle soak seed 21386)
        rc, _out, err = rmq(["verify", str(c.store), "-q", "--broker-version", rmq_version(res.version)])
        ok = rc == 8 and "not a RocketMQ store" in err and not view.get("commitlog_records")
        res.results["verify"] = (
            []
            if ok
            else [
                f"verify: status {rc} on a directory holding only {sorted(p.name for p in c.store.iterdir())}: {err.strip()[-160:]}"
            ]
        )
        for k in ("dump", "recover", "rebuild", "reopen"):
            res.skipped[k] = "no store: rmqtool refuses it (exit 8)"
        return False
    lost = lost_acknowledged(c.result or {}, view)
    if lost and lost_without_trace(c.store, c.result or {}, view, c.config):
        lost = 0
    ro = rmqtool_read_only_checks(c.store, res.version, c.config, view, lost)
    if res.scenario.get("probe_duplication"):
        ro["refuse"] = refusal_checks(c.store, res.version, c.config, c.work)
    if ro.pop("_prop_crc_cut", None) is not None:
        for k in ("recover", "rebuild", "reopen"):
            res.skipped[k] = "forceVerifyPropCRC cut, not modelled by rmqtool (man rmqtool-recover)"
        res.results.update(ro)
        return False
    res.results.update(ro)
    if not view.get("load_ok", True):
        for k in ("recover", "rebuild", "reopen"):
            res.skipped[k] = "the broker does not load this store"
        return False
    shutil.copytree(c.store, c.rec)
    rc, msg = run_recover(c.rec, res.version, c.config)
    if rc not in (0, 1) and not queue_gap_left(rc, msg):
        res.results["recover"] = [f"recover: status {rc}: {msg}"]
        res.skipped["rebuild"] = res.skipped["reopen"] = "recover did not repair"
        return False
    res.results["recover"] = recovered_checks(c.rec, res.version, c.config, view, superset_keys=not c.undamaged_clean)
    # the forced modes: --abnormal on the store without its abort file does what the broker
    # did with one, --normal on the store with an abort file what it did without
    forced = c.work / "forced" / "store"
    shutil.copytree(c.store, forced)
    if view_mode(view) == "abnormal" and (forced / "abort").exists():
        (forced / "abort").unlink()
        flag = "--abnormal"
    elif view_mode(view) == "normal" and not (forced / "abort").exists():
        (forced / "abort").write_bytes(b"")
        flag = "--normal"
    else:
        flag = ""
    if flag:
        frc, fmsg = run_recover(forced, res.version, c.config, [flag])
        if frc not in (0, 1) and not queue_gap_left(frc, fmsg):
            res.results["recover"].append(f"recover {flag}: status {frc}: {fmsg}")
        else:
            res.results["recover"] += [
                f"recover {flag}: {b}"
                for b in recovered_checks(forced, res.version, c.config, view, superset_keys=not c.undamaged_clean)
            ]
    shutil.rmtree(c.work / "forced", ignore_errors=True)
    if "rebuild" in checks and any(d.startswith(("bitflip", "zero_tail", "truncate")) for d in res.damage_done):
        # the broker's consume queues were dispatched from the bytes before the damage (a
        # normal start does not dispatch again), rebuild-index's from the damaged bytes
        res.skipped["rebuild"] = "commitlog damaged: the broker's queues predate the damage"
    elif "rebuild" in checks:
        # lost queue files, or a killed store opened without its abort file (a normal start
        # does not dispatch what the reput had not reached: the broker keeps that gap,
        # rebuild-index fills it)
        lost = any(d.startswith("rm consumequeue/") for d in res.damage_done) or (
            res.scenario["end"]["mode"] == "kill" and "rm abort" in res.damage_done
        )
        res.results["rebuild"] = rebuild_checks(
            c.rec,
            res.version,
            c.config,
            view,
            c.work,
            exact_index=c.undamaged_clean,
            queues_lost=lost,
            original=c.store,
        )
    if "reopen" not in checks:
        return False
    if rc == 0:
        res.skipped["reopen"] = "recover changed nothing: the broker would open the same bytes"
        return False
    return True


def run_cases(
    oracle: Oracle,
    specs: list[tuple[int, str]],
    work: Path,
    *,
    max_messages: int = 120,
    checks: tuple[str, ...] = CHECKS,
    parallel: int = 1,
    keep: bool = False,
    progress: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Every (seed, version) case: per version one ``batch`` JVM writes every store, one views
    the damaged stores, one views the stores rmqtool recovered."""
    out: list[CaseResult] = []
    by_version: dict[str, list[int]] = {}
    for seed, version in specs:
        by_version.setdefault(version, []).append(seed)
    for version, seeds in by_version.items():
        cases = []
        for seed in seeds:
            w = work / f"{version}-{seed}"
            shutil.rmtree(w, ignore_errors=True)
            w.mkdir(parents=True)
            cases.append(_Case(CaseResult(seed, version, gen_scenario(seed, version, max_messages=max_messages)), w))
        # 1. the broker writes
        jobs = [
            {"id": i, "verb": "write", "scenario": harness_scenario(c.res.scenario), "out": str(c.work / "w")}
            for i, c in enumerate(cases)
        ]
        for c, r in zip(cases, _batch(oracle, version, jobs, parallel, cases, "write")):
            c.t += r.get("elapsed_ms", 0) / 1000
            if r.get("exit") != 0:
                c.res.results["write"] = [f"rocketmq-oracle write: {r.get('error')}"]
            else:
                c.res.results["write"] = []
                c.result = r.get("result") or json.loads((c.work / "w" / "result.json").read_text(encoding="utf-8"))
        live = [c for c in cases if c.result is not None]
        # 2. damage; the broker's own recovery and view
        for c in live:
            c.res.damage_done = _timed(c, lambda c=c: apply_damage(c.store, c.res.scenario["damage"]))
            c.undamaged_clean = c.res.scenario["end"]["mode"] == "clean" and not c.res.damage_done
        _view_and_compare(oracle, version, live, parallel, checks)
        for c in cases:
            c.res.seconds = c.t
            if not keep and c.res.ok:
                shutil.rmtree(c.work, ignore_errors=True)
            out.append(c.res)
            if progress:
                progress(c.res)
    return out


def _view_and_compare(oracle: Oracle, version: str, live: list[_Case], parallel: int, checks: tuple[str, ...]) -> None:
    """Phases 2-4 of :func:`run_cases` on damaged stores: the broker's view, rmqtool's
    side, the broker's view of what rmqtool recovered."""
    if True:
        jobs = [{"id": i, "verb": "view", "config": c.config, "store": str(c.store)} for i, c in enumerate(live)]
        again = []
        for c, r in zip(live, _batch(oracle, version, jobs, parallel, live, "view")):
            c.t += r.get("elapsed_ms", 0) / 1000
            if r.get("exit") != 0:
                c.res.results["oracle"] = [f"rocketmq-oracle view: {r.get('error')}"]
                continue
            c.view = r["result"]
            # 3. rmqtool's side
            t0 = time.monotonic()
            try:
                if _timed(c, lambda c=c: _checks_after_view(c, checks)):
                    again.append(c)
            except Exception as exc:  # noqa: BLE001 - a crash of rmqtool or the comparison is a finding
                c.res.results["harness"] = [f"{type(exc).__name__}: {exc}"]
            c.res.phases["rmqtool"] = time.monotonic() - t0
        # 4. the broker opens what rmqtool recovered
        jobs = [{"id": i, "verb": "view", "config": c.config, "store": str(c.rec)} for i, c in enumerate(again)]
        for c, r in zip(again, _batch(oracle, version, jobs, parallel, again, "reopen") if jobs else []):
            c.t += r.get("elapsed_ms", 0) / 1000
            if r.get("exit") != 0:
                c.res.results["reopen"] = [f"reopen: the broker fails on the store rmqtool recovered: {r.get('error')}"]
            else:
                assert c.view is not None
                c.res.results["reopen"] = _timed(
                    c, lambda c=c, r=r: compare_reopen(c.view, r["result"], c.rec, c.store)
                )


def rerun_kept(
    oracle: Oracle,
    seed: int,
    version: str,
    kept: Path,
    damage_done: list[str],
    work: Path,
    *,
    max_messages: int = 120,
    checks: tuple[str, ...] = CHECKS,
) -> CaseResult:
    """A case again from the store it left (``--keep`` or a disagreeing case's work
    directory: KEPT/w/store after the damage, KEPT/w/result.json): the broker's view and
    every comparison, without the write. For killed writers, whose store a rerun of the
    seed does not make again (the kill lands elsewhere)."""
    c = _Case(CaseResult(seed, version, gen_scenario(seed, version, max_messages=max_messages)), work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "w").mkdir(parents=True)
    shutil.copytree(kept / "w" / "store", c.store)
    c.result = json.loads((kept / "w" / "result.json").read_text(encoding="utf-8"))
    c.res.results["write"] = []
    c.res.damage_done = list(damage_done)  # (what the soak did to it: the checks depend on it)
    c.undamaged_clean = c.res.scenario["end"]["mode"] == "clean" and not damage_done
    _view_and_compare(oracle, version, [c], 1, checks)
    return c.res


def _batch(
    oracle: Oracle, version: str, jobs: list[dict[str, Any]], parallel: int, cases: list[_Case], phase: str
) -> list[dict[str, Any]]:
    """oracle.batch, noting in each case's ``phases`` its job's time inside the JVM
    (PHASE) and its share of the rest of the batch's wall time (``jvm_other``: JVM start,
    class loading, the harness's JSON)."""
    t0 = time.monotonic()
    out = oracle.batch(version, jobs, parallel)
    wall = time.monotonic() - t0
    inside = sum(r.get("elapsed_ms", 0) for r in out) / 1000
    for c, r in zip(cases, out):
        c.res.phases[phase] = r.get("elapsed_ms", 0) / 1000
        c.res.phases["jvm_other"] = c.res.phases.get("jvm_other", 0.0) + max(0.0, wall - inside) / max(1, len(out))
    return out


def run_case(oracle: Oracle, seed: int, version: str, work: Path, **kw: Any) -> CaseResult:
    return run_cases(oracle, [(seed, version)], work, **kw)[0]
