"""Recovery outlook: where normal and abnormal recovery start, and where they stop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...formats.checkpoint import Checkpoint
from .. import check as ck
from ..broker import (
    MODE_ABNORMAL,
    MODE_NORMAL,
    abnormal_threshold,
    index_file_deleted_at_load,
    start_file_index,
)
from ..store import Store
from ..versions import BrokerProfile
from ..walk import store_framing
from .parts import FileScan, Records, rel_path
from .records import DAMAGED

# Recovery outlook: where normal and abnormal recovery start, and where they stop.


def _process_offset(
    store: Store, scans: Sequence[FileScan | None], i0: int, profile: BrokerProfile | None = None, n: int | None = None
) -> tuple[int, int]:
    """Where the broker's recovery walk, started at file ``i0``, stops: (processOffset,
    index of the file it stops in); ``n``: the first n commitlog files only. verify's scan
    walks with the CRC on; under checkCRCOnRecover=false (``profile.check_crc_on_recover``)
    the broker's walk goes on past a record whose CRC fails: from there the file is walked
    again by recover's own walk without the CRC (:func:`recovery.recover.recovery_stop`)."""
    files = store.commitlog[:n]
    crc_on = profile is None or profile.check_crc_on_recover
    for i in range(i0, len(files)):
        fs = scans[i]
        if fs is None:
            return files[i].base, i
        stop_pos = fs.stop.pos if fs.stop is not None else None
        blank = fs.blank
        if not crc_on and fs.stop is not None and fs.stop.reason in (ck.CRC, ck.PROP_CRC):
            from ..recover import recovery_stop

            assert profile is not None
            pos, why = recovery_stop(files[i], fs.stop.pos, fs.end, profile, False, store_framing(store, files[i]))
            stop_pos = pos if why is not None else None
            blank = why == ck.BLANK
        if blank:
            if i == len(files) - 1:
                assert stop_pos is not None
                return files[i].base + stop_pos, i
            continue
        if stop_pos is not None:
            return files[i].base + stop_pos, i
        return files[i].base + fs.end, i
    return (files[-1].base if files else 0), max(len(files) - 1, 0)


def recovery_outlook(
    store: Store,
    profile: BrokerProfile,
    scans: Sequence[FileScan | None],
    recs: Records,
    max_phy_cq: int,
    ckpt: Checkpoint,
    load_blockers: list[str],
    index_headers: list[tuple[str, Any]],
    rocks_cq: bool = False,
) -> dict[str, Any]:
    """Where the broker's normal and abnormal recoveries start and stop. ``rocks_cq``: a
    storeType=defaultRocksDB store (``max_phy_cq`` its RocksDB queue's dispatch checkpoint,
    by which both recoveries pick their start file)."""
    files = store.commitlog
    if profile.zero_length_last_file_deleted and len(files) > 1 and files[-1].size == 0:
        # 5.1.3+ deletes it at load, before recovery: the walk ends in the file before it,
        # at its BLANK when it has one (oracle soak seed 21658)
        files = files[:-1]
    out: dict[str, Any] = {
        "mode": "abnormal" if store.abort_present else "normal",
        "loads": not load_blockers,
        "load_blockers": load_blockers,
        "max_phy_offset_of_cq": max_phy_cq,
        "commitlog_min_offset": store.commitlog_min_offset(),
        "data_end": int(recs.off[-1]) + int(recs.size[-1]) if len(recs) else (files[0].base if files else 0),
    }
    if not files:
        out["normal"] = out["abnormal"] = None
        return out
    # where normal (RECOVERY §4.1, §4.2) and abnormal (§5.1) recovery start: recover's own
    # rule, with the profile's settings (messageIndexSafe)
    i_norm, rule = start_file_index(files, profile, ckpt, MODE_NORMAL, max_phy_cq, rocks_cq)
    i_abn, rule_abn = start_file_index(files, profile, ckpt, MODE_ABNORMAL, max_phy_cq, rocks_cq)
    threshold = abnormal_threshold(ckpt, profile.message_index_safe)
    out["check_crc"] = profile.check_crc_on_recover
    out["message_index_safe"] = profile.message_index_safe
    for key, i0, why in (("normal", i_norm, rule), ("abnormal", i_abn, rule_abn)):
        po, istop = _process_offset(store, scans, i0, profile, len(files))
        # intact records only (as recover counts them): a readable record that fails its CRC
        # is in the table but is not intact
        cut = int(np.count_nonzero((recs.flags[np.searchsorted(recs.off, po) :] & DAMAGED) == 0)) if len(recs) else 0
        out[key] = {
            "start_file": rel_path(store, files[i0].path),
            "start_offset": files[i0].base,
            "rule": why,
            "stop_offset": po,
            "stop_file": rel_path(store, files[istop].path),
            "bytes_scanned": po - files[i0].base,
            "records_cut": cut,
            "files_deleted": [
                rel_path(store, f.path)
                for f in files
                if f.base > po and f.base >= files[istop].base and f is not files[istop]
            ]
            + [rel_path(store, f.path) for f in store.commitlog[len(files) :]],
        }
    out["abnormal"]["threshold_timestamp"] = threshold
    out["abnormal"]["index_files_deleted"] = [
        name for name, h in index_headers if h is not None and index_file_deleted_at_load(h, ckpt)
    ]
    return out


def prop_crc_condition(
    outlook: dict[str, Any], profile: BrokerProfile, recs: Records, prop_crc_offsets: Sequence[int]
) -> None:
    """Where a broker setting the store does not show decides the outcome: on 5.2+ without
    forceVerifyPropCRC (not given: off), a record whose __CRC32# does not match is read on;
    with forceVerifyPropCRC=true (the usual companion of enabledAppendPropCRC) the broker's
    walk stops at the first one it reads and cuts from there. Each mode's outlook gets
    ``if_force_verify_prop_crc`` {stop_offset, records_cut} (intact records, counted as the
    outlook counts them) where that first mismatch lies in its walk."""
    if not profile.has_prop_crc or profile.force_verify_prop_crc or not prop_crc_offsets:
        return
    xs = sorted(prop_crc_offsets)
    for key in ("normal", "abnormal"):
        o = outlook.get(key)
        if not isinstance(o, dict):
            continue
        x = next((x for x in xs if o["start_offset"] <= x < o["stop_offset"]), None)
        if x is None:
            continue
        cut = int(np.count_nonzero((recs.flags[np.searchsorted(recs.off, x) :] & DAMAGED) == 0)) if len(recs) else 0
        o["if_force_verify_prop_crc"] = {"stop_offset": x, "records_cut": cut}
