"""The records of the region recovery cuts: found by resyncing past damage, counted by
the plan, written by ``--salvage-to``."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ...formats.errors import RecoveryError
from .. import check as ck
from ..framing import Framing
from ..scan import message_fields
from ..store import Store, StoreFile
from ..times import add_times
from ..versions import BrokerProfile
from ..walk import GO, Act, Policy, Source, finish, resync_from, walk
from .model import RecoveryPlan


class _Salvage(Policy):
    """The records after a recovery's cut, found by resyncing past damage: each record
    that validates without the CRC and holds its own offset, as (position, size, intact:
    its body CRC matches too); resync after any other."""

    batched = False

    def __init__(self) -> None:
        super().__init__()
        self.check_opts = {"check_crc": False, "read_body": True}
        self.found: list[tuple[int, int, bool]] = []

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if not c.is_message or c.rec is None or not src.framing.own_offset(c, src.base, pos):
            return resync_from(pos + 1)
        self.found.append((pos, c.size, c.rec.body_crc_ok(src.buf)))
        return GO


def salvage_positions(
    buf: Any, pos: int, end: int, base: int, profile: BrokerProfile, framing: Framing | None = None
) -> list[tuple[int, int, bool]]:
    """Records found after ``pos`` by resyncing past damage: (position, size, intact)
    where intact means the record also passes the CRC check. Structure is checked without
    the CRC, so a record whose body was damaged is found (and reported not intact)."""
    src = Source(buf, end, base, profile, framing)
    pol = _Salvage()
    q = pol.resync(src, pos)
    if q is not None:
        finish(walk(src, pol, q, end))
    return pol.found


def write_salvage(
    store: Store, plan: RecoveryPlan, profile: BrokerProfile, out_dir: str | Path, *, list_only: bool = False
) -> dict[str, Any]:
    """Write the intact records of the bytes that will be cut: ``salvaged.jsonl``, exactly
    the lines ``rmqtool dump commitlog --format jsonl --body-hash`` prints for them, and
    ``salvaged.bin`` (the records' raw bytes, back to back in the same order: a line's bytes
    start at the sum of the earlier lines' ``total_size``). Files are written beside,
    fsynced and renamed into place. ``list_only`` (a dry run): ``would_be_cut.jsonl``, the
    same lines, and no bytes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("commitlog", "consumequeue", "index"):
        if out.resolve().is_relative_to((store.root / sub).resolve()):
            raise RecoveryError(f"--salvage-to must not be inside the store's {sub}/", out)
    F = store.geometry.commitlog_file_size
    targets: list[tuple[StoreFile, int]] = []
    by_name = {f"commitlog/{f.name}": f for f in store.commitlog}
    for cut in plan.cuts:
        targets.append((by_name[cut.file], cut.pos))
    for r in plan.removed_files:
        if r.path in by_name:
            targets.append((by_name[r.path], 0))
    jl_name = "would_be_cut.jsonl" if list_only else "salvaged.jsonl"
    jl_tmp = out / f".{jl_name}.tmp"
    bin_tmp = out / ".salvaged.bin.tmp"
    n = 0
    raw_at = 0
    with open(jl_tmp, "w", encoding="utf-8") as jl, open(os.devnull if list_only else bin_tmp, "wb") as raw:
        for f, pos in targets:
            with store.map(f) as mf:
                buf = mf.buf
                for q, size, intact in salvage_positions(buf, pos, min(mf.size, F), f.base, profile):
                    if not intact:
                        continue
                    c = ck.check_record(buf, q, min(mf.size, F), profile, check_crc=True, read_body=True)
                    if not c.is_message:
                        continue
                    rec = add_times(message_fields(f.name, c, buf, body_hash=True))  # as dump prints it
                    if not list_only:
                        raw.write(bytes(buf[q : q + size]))
                    raw_at += size
                    # the serialization of dump's JSON lines (render.dumps)
                    jl.write(json.dumps(rec, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
                    n += 1
                del buf
        jl.flush()
        os.fsync(jl.fileno())
        raw.flush()
        if not list_only:
            os.fsync(raw.fileno())
    if not list_only:
        os.replace(bin_tmp, out / "salvaged.bin")
    os.replace(jl_tmp, out / jl_name)
    dfd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    if list_only:
        return {"dir": str(out), "records": n, "bytes": raw_at, "list": jl_name}
    digest = hashlib.sha256((out / "salvaged.bin").read_bytes()).hexdigest()
    return {"dir": str(out), "records": n, "bytes": raw_at, "sha256": digest}
