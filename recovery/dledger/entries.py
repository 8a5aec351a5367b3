"""The records of ``rmqtool dump dledger``: a DLedger member's entries as its data files hold
them (each header's fields, whether its index unit agrees, whether the checkpoint counts it
committed, where DLedger's recovery ends the ledger), its index units, and its state
(checkpoint, currterm, the ledger DLedger's recovery leaves).

The entries are walked by the one walker (:mod:`recovery.walk`) with the DLedger framing
and :class:`EntryRows`: runs of entries chained by their sizes, their headers read at once;
an entry whose header the chain refuses is listed with why, and the walk resyncs past it
(the framing's search for an intact entry), as ``dump commitlog`` does past damage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...formats import dledger as dl
from ..store import MappedFile, Store
from ..versions import BrokerProfile
from ..walk import STOP, Act, Policy, Run, Source, resync_from, walk
from .framing import DLEDGER
from .layout import read_checkpoint, read_term
from .ledger import IndexList, LedgerRecovery, ledger_for

__all__ = ["entry_records", "state_record", "unit_records"]

Record = dict[str, Any]


class EntryRows(Policy):
    """The entries of one data file, handed on as ``(pos, header fields or None, why)``."""

    need = 0

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        S = run.S[i:k]
        v = src.views
        ok = S + dl.BODY_OFFSET <= v.n
        t = len(S) if ok.all() else int(np.argmin(ok))
        if t:
            S = S[:t]
            rows = np.stack(
                [
                    v.i4[S],
                    v.i4[S + 4],
                    v.i8[S + 8],
                    v.i8[S + 16],
                    v.i8[S + 24],
                    v.i4[S + 32],
                    v.i4[S + 36],
                    v.i4[S + 40],
                    v.i4[S + 44],
                ],
                axis=1,
            ).astype(np.int64)
            self.out.append(("run", S, rows))
        return i + t, t < k - i

    def decide(self, src: Source, pos: int, c: Any, j: int) -> Act:
        buf, n = src.buf, src.end
        if n - pos >= 8 and int.from_bytes(bytes(buf[pos : pos + 4]), "big", signed=True) == dl.BLANK_MAGIC:
            self.out.append(("padding", pos, int.from_bytes(bytes(buf[pos + 4 : pos + 8]), "big", signed=True)))
            return STOP
        if n - pos < 8 or not bytes(buf[pos : min(n, pos + dl.BODY_OFFSET)]).strip(b"\0"):
            return STOP  # the end of the data (zeros)
        if n - pos >= dl.BODY_OFFSET:
            h = dl.read_entry_header(buf, pos)
            if h.magic == dl.MAGIC_1 and 0 < h.size <= n - pos:
                self.out.append(("entry", pos, h))
                return Act(0, h.size)  # (GO past it by its own size)
            self.out.append(("bad", pos, h))
        else:
            self.out.append(("bad", pos, None))
        return resync_from(pos + 1)


def _fields(base: int, pos: int, h: tuple[int, ...]) -> Record:
    magic, size, index, term, pos_f, channel, chain_crc, body_crc, body_len = (int(x) for x in h)
    return {
        "type": "entry",
        "offset": base + pos,
        "magic": magic,
        "size": size,
        "index": index,
        "term": term,
        "pos_field": pos_f,
        "channel": channel,
        "chain_crc": chain_crc,
        "body_crc": body_crc,
        "body_length": body_len,
        "message_offset": base + pos + dl.BODY_OFFSET,
    }


def entry_records(store: Store, profile: BrokerProfile) -> Iterator[Record]:
    """Every entry of the member's data files, in order, with ``status``: OK, or what
    DLedger's recovery says of it (``BEYOND_LEDGER_END``: after where its recovery ends the
    ledger; ``BAD_HEADER``: its own pos or body length disagree), ``index_unit`` (whether
    its unit agrees: true, false, or null for none), ``committed`` (index <= the
    checkpoint's committedIndex); paddings and unreadable headers as their own records."""
    lr = ledger_for(store, profile)
    committed = dl.parse_java_long(lr.checkpoint_committed) if lr.checkpoint_committed else None
    index = IndexList(store.dledger_index)
    try:
        for f in store.dledger_data:
            if not f.size:
                continue
            with MappedFile(f.path) as mf:
                src = Source(mf.buf, mf.size, f.base, profile, DLEDGER)
                try:
                    for item in walk(src, EntryRows(), 0, mf.size):
                        yield from _records(f, item, lr, committed, index)
                finally:
                    src.release()
    finally:
        index.close()


def _records(
    f: Any, item: tuple[Any, ...], lr: LedgerRecovery, committed: int | None, index: IndexList
) -> Iterator[Record]:
    kind = item[0]
    if kind == "padding":
        yield {
            "type": "padding",
            "file": f.name,
            "pos": item[1],
            "offset": f.base + item[1],
            "size": item[2],
            "status": "PADDING",
        }
        return
    if kind == "bad":
        h = item[2]
        r: Record = {
            "type": "damaged",
            "file": f.name,
            "pos": item[1],
            "offset": f.base + item[1],
            "status": "BAD_HEADER",
        }
        if h is not None:
            r.update({k: v for k, v in _fields(f.base, item[1], tuple(h)).items() if k not in ("type", "offset")})
        yield r
        return
    if kind == "entry":
        S = np.array([item[1]], dtype=np.int64)
        rows = np.array([tuple(item[2])], dtype=np.int64)
    else:
        S, rows = item[1], item[2]
    units, present = index.units(rows[:, 2])
    for j in range(len(S)):
        pos = int(S[j])
        r = _fields(f.base, pos, tuple(rows[j]))
        r["file"] = f.name
        r["pos"] = pos
        u_ok = None
        if present[j]:
            u = units[j]
            u_ok = bool(
                int(u["magic"]) == r["magic"]
                and int(u["pos"]) == r["offset"]
                and int(u["size"]) == r["size"]
                and int(u["index"]) == r["index"]
                and int(u["term"]) == r["term"]
            )
        r["index_unit"] = u_ok
        r["committed"] = committed is not None and r["index"] <= committed
        if r["offset"] >= lr.process_offset:
            r["status"] = "BEYOND_LEDGER_END"
        elif r["pos_field"] != r["offset"] or r["body_length"] + dl.BODY_OFFSET != r["size"]:
            r["status"] = "BAD_HEADER"
        else:
            r["status"] = "OK"
        yield r


def unit_records(store: Store, profile: BrokerProfile) -> Iterator[Record]:
    """The member's index units up to the ledger's last entry (and any non-zero unit
    after it, stale), each with the entry index its place gives."""
    lr = ledger_for(store, profile)
    for f in store.dledger_index:
        if f.size < dl.INDEX_UNIT_SIZE:
            continue
        with MappedFile(f.path) as mf:
            extents = getattr(mf.buf, "data_extents", [(0, mf.size)])
            arr = np.frombuffer(mf.buf, dtype=np.uint8, count=mf.size - mf.size % dl.INDEX_UNIT_SIZE)
            for a, b in extents:
                a -= a % dl.INDEX_UNIT_SIZE
                b = min(b + (-b) % dl.INDEX_UNIT_SIZE, len(arr))
                units = arr[a:b].view(dl.INDEX_DTYPE)
                nz = np.flatnonzero(arr[a:b].reshape(-1, dl.INDEX_UNIT_SIZE).any(axis=1))
                for k in nz:
                    u = units[int(k)]
                    place = (f.base + a) // dl.INDEX_UNIT_SIZE + int(k)
                    yield {
                        "type": "index_unit",
                        "file": f.name,
                        "pos": a + int(k) * dl.INDEX_UNIT_SIZE,
                        "place": place,
                        "magic": int(u["magic"]),
                        "entry_pos": int(u["pos"]),
                        "size": int(u["size"]),
                        "index": int(u["index"]),
                        "term": int(u["term"]),
                        "status": "STALE"
                        if place > lr.last_index
                        else ("OK" if int(u["index"]) == place else "MISPLACED"),
                    }
            del arr


def state_record(store: Store, profile: BrokerProfile) -> Record:
    """The member's state: its files, checkpoint, currterm, and the ledger as DLedger's
    recovery leaves it."""
    m = store.dledger
    assert m is not None
    lr = ledger_for(store, profile)
    cp, cp_present = read_checkpoint(m, store.root)
    term, term_present = read_term(m, store.root)
    return {
        "type": "state",
        "member": str(m.dir.relative_to(store.root)) if m.dir.is_relative_to(store.root) else str(m.dir),
        "self_id": m.self_id,
        "data_files": len(store.dledger_data),
        "index_files": len(store.dledger_index),
        "divided_commitlog_offset": store.dledger_data[0].base if store.dledger_data else None,
        "checkpoint_present": cp_present,
        "checkpoint_end_index": cp.end_index,
        "checkpoint_committed_index": cp.committed_index,
        "currterm_present": term_present,
        "curr_term": term.curr_term,
        "vote_leader": term.vote_leader,
        "library": lr.library,
        "begin_index": lr.begin_index,
        "end_index": lr.last_index,
        "end_term": lr.last_term,
        "end_offset": lr.process_offset,
        "entries_end": lr.entries_end,
        "committed_index": lr.committed_index,
        "committed_pos": lr.committed_pos,
        "index_rewrite_from": lr.index_rewrite_from,
        "stop_reason": lr.stop_why,
        "broker_exits": lr.exits,
        "load_refused": lr.refused,
        "status": "OK" if lr.loads else "REFUSED",
    }
