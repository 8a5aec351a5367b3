"""Findings: layout and commitlog."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...formats import commitlog as cl
from .. import check as ck
from ..configfiles import config_blocking_start
from ..filler import MIN_RECORD, MIN_RECORD_PROP_CRC
from ..findingcodes import FindingCode
from ..store import Store
from ..versions import BrokerProfile
from .parts import FileScan, Records, rel_path
from .records import DAMAGED, INNER_BATCH, PHYS, Event, Gap, to_queue
from .report import Finding, finding
from .spans import Spans

# Findings: layout and commitlog.

_REASON_CODES: dict[str, FindingCode] = {
    ck.BAD_MAGIC: FindingCode.CL_BAD_MAGIC,
    ck.V2_NOT_SUPPORTED: FindingCode.CL_V2_UNSUPPORTED,
    ck.SHORT: FindingCode.CL_TRUNCATED_RECORD,
    ck.NEGATIVE_TOTAL: FindingCode.CL_BAD_LENGTH,
    ck.TOO_LONG: FindingCode.CL_BAD_LENGTH,
    ck.NEGATIVE_TOPIC: FindingCode.CL_BAD_LENGTH,
    ck.CRC: FindingCode.CL_BODY_CRC,
    ck.DELAY_PARSE: FindingCode.CL_BAD_DELAY_LEVEL,
    ck.PROP_CRC: FindingCode.CL_PROP_CRC,
    ck.SIZE_MISMATCH: FindingCode.CL_SIZE_MISMATCH,
    ck.INNER_BATCH: FindingCode.CL_BAD_INNER_BATCH,
    PHYS: FindingCode.CL_PHYS_OFFSET_MISMATCH,
}

_REASON_TEXT: dict[str, str] = {
    ck.BAD_MAGIC: "bad magic",
    ck.V2_NOT_SUPPORTED: "V2 magic, unreadable for this broker version",
    ck.SHORT: "the record runs past the end of the file",
    ck.NEGATIVE_TOTAL: "negative TOTALSIZE",
    ck.TOO_LONG: "a field is longer than the whole record",
    ck.NEGATIVE_TOPIC: "negative topic length",
    ck.CRC: "body CRC mismatch",
    ck.DELAY_PARSE: "DELAY property is not an int",
    ck.PROP_CRC: "__CRC32# property mismatch",
    ck.SIZE_MISMATCH: "TOTALSIZE differs from the computed length",
    ck.INNER_BATCH: "bad INNER_NUM/INNER_BASE",
    PHYS: "stored PHYSICALOFFSET differs from the position",
    ck.END_OF_DATA: "all-zero header",
}


def zero_length_lost(f: Finding, store: Store, max_phy_cq: int) -> Finding:
    """A zero-length last commitlog file is harmless to 5.1.3+ unless the consume queues
    point into it: then its messages are gone (found by the broker oracle, tests/oracle)."""
    if f.code != FindingCode.FILE_ZERO_LENGTH_LAST or not (f.file or "").startswith("commitlog/"):
        return f
    base = store.commitlog[-1].base if store.commitlog else None
    if base is None or max_phy_cq < base:
        return f
    return finding(
        FindingCode.FILE_ZERO_LENGTH_LOST,
        f.file,
        None,
        base,
        f"zero-length last commitlog file; consume queue units point up to offset {max_phy_cq} in it: "
        "the broker deletes it at load and cuts them, their messages are lost",
        **f.details,
    )


def layout_findings(store: Store, profile: BrokerProfile) -> tuple[list[Finding], list[str]]:
    """Store.issues as findings; also the files that make the broker refuse to load."""
    last = {rel_path(store, store.commitlog[-1].path)} if store.commitlog else set()
    for files in store.consume_queues.values():
        if files:
            last.add(rel_path(store, files[-1].path))
    out: list[Finding] = []
    blockers: list[str] = []
    cl_index = {rel_path(store, f.path): k for k, f in enumerate(store.commitlog)}
    for iss in store.issues:
        sev = iss.severity
        if iss.code == "STRAY_FILE":
            code = FindingCode.FILE_STRAY if sev == "error" else FindingCode.FILE_IGNORED
        elif iss.code == "MISNAMED_FILE":
            code = (
                FindingCode.FILE_STRAY
                if sev == "error"
                else (FindingCode.FILE_IGNORED if iss.path.startswith("index") else FindingCode.FILE_MISNAMED)
            )
        elif iss.code == "ZERO_LENGTH_FILE":
            lastfile = iss.path in last
            code = (
                FindingCode.FILE_ZERO_LENGTH_LAST
                if lastfile and profile.zero_length_last_file_deleted
                else FindingCode.FILE_ZERO_LENGTH
            )
        elif iss.code == "WRONG_FILE_SIZE":
            code = FindingCode.FILE_WRONG_SIZE
        elif iss.code in (FindingCode.FILE_GAP, FindingCode.FILE_OVERLAP):
            code = FindingCode(iss.code)
        elif iss.code == "MISALIGNED_FILE":
            code = FindingCode.FILE_MISALIGNED
        elif iss.code == "UNSAFE_FILE":
            code = FindingCode.FILE_UNSAFE
        elif iss.code == "SYMLINK":
            code = FindingCode.FILE_SYMLINK
        elif iss.code == "UNWRITABLE_DIR":
            code = FindingCode.DIR_UNWRITABLE
        elif iss.code == FindingCode.GEOMETRY_ASSUMED:
            code = FindingCode.GEOMETRY_ASSUMED
        else:
            code = FindingCode.FILE_STRAY if sev == "error" else FindingCode.FILE_IGNORED
        phys = None
        if code in (FindingCode.FILE_GAP, FindingCode.FILE_OVERLAP) and iss.path in cl_index:
            k = cl_index[iss.path]
            if k:  # the missing/overlapping range starts where the previous file ends
                phys = store.commitlog[k - 1].base + store.geometry.commitlog_file_size
        out.append(finding(code, iss.path, None, phys, iss.message, layout_code=iss.code, size=iss.size))
        if code in (
            FindingCode.FILE_STRAY,
            FindingCode.FILE_ZERO_LENGTH,
            FindingCode.FILE_WRONG_SIZE,
        ) and not iss.path.startswith("index"):
            blockers.append(iss.path)
    blocking = config_blocking_start(store.root)  # (its start never gets to the store: CFG_LOAD_FAILS says why)
    if blocking is not None:
        blockers.append(blocking)
    return out, blockers


def commitlog_spans(store: Store, scans: Sequence[FileScan | None], recs: Records) -> list[tuple[int, int, str]]:
    """Commitlog regions whose data is lost or unreadable, with intact data after them or
    explained by a layout finding: missing files, zero-length files, truncated tails, and
    every non-record region followed by an intact record. (start, end, what)."""
    mapped = store.geometry.commitlog_file_size
    last_rec = int(recs.off[-1]) if len(recs) else -1
    spans: list[tuple[int, int, str]] = []
    files = store.commitlog
    for k, f in enumerate(files):
        if k and f.base > files[k - 1].base + mapped:
            spans.append((files[k - 1].base + mapped, f.base, "missing file"))
        if f.size < mapped:
            spans.append((f.base + f.size, f.base + mapped, "zero-length file" if f.size == 0 else "truncated file"))
        fs = scans[k]
        if fs is None:
            continue
        blank_at = fs.stop.pos if fs.blank and fs.stop is not None else None
        if blank_at is not None:
            sel = recs.off[recs.file_idx == k] if len(recs) else np.zeros(0, dtype=np.int64)
            hidden = sel[sel > f.base + blank_at]
            if len(hidden):  # a damaged header read as BLANK: the region up to the next intact record
                spans.append((f.base + blank_at, int(hidden[0]), "record read as BLANK"))
        for g in fs.gaps:
            if blank_at is not None and g.start > blank_at:
                continue  # after a BLANK the bytes are undefined (or covered just above)
            if f.base + g.start < last_rec or (f.size < mapped and g.end >= fs.end):
                spans.append(
                    (
                        f.base + g.start,
                        f.base + g.end,
                        _REASON_TEXT.get(g.reason, "unreadable region") if g.reason else "unreadable region",
                    )
                )
    spans.sort()
    return spans


def _zeroed_properties_tail(path: Path, pos: int, size: int) -> int:
    """How many zero bytes end the properties of the record at POS of the file PATH (its
    last field; 0 when it has none, or they do not end in a zero byte, or it is unreadable).
    The broker never writes a NUL there: its properties string ends with a separator or a
    value, and a NUL in a value is vanishingly rare, while a zeroed or torn tail leaves a
    run of them."""
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read(size)
        rec = cl.decode_message(data, 0, len(data))
    except (OSError, cl.DecodeFailure, ValueError):
        return 0
    n = int(rec.properties_length)
    if n <= 0 or len(data) != size or rec.total_size != size:
        return 0
    props = data[size - n :]
    return n - len(props.rstrip(b"\0"))


class _ClCheck:
    """The commitlog findings (:func:`commitlog_findings`): every event of every file's
    walk (BLANK, end of data, a failed check), a file without a BLANK at its end, and the
    intact records after the broker's stop."""

    def __init__(self, store: Store, profile: BrokerProfile, recs: Records, outlook: dict[str, Any]) -> None:
        self.profile, self.recs, self.outlook = profile, recs, outlook
        self.mapped = store.geometry.commitlog_file_size
        self.abort = store.abort_present
        self.out: list[Finding] = []
        self.mode = outlook.get("mode", "normal")
        self.po = (outlook.get(self.mode) or {}).get("stop_offset")
        self.n_rec = len(recs)
        self.offs = recs.off
        self.min_rec = MIN_RECORD_PROP_CRC if profile.verify_prop_crc else MIN_RECORD

    def after(self, g_off: int) -> int:
        """The number of intact records after offset ``g_off``."""
        return int(self.n_rec - np.searchsorted(self.offs, g_off, side="right")) if self.n_rec else 0

    def next_intact(self, g_off: int) -> int | None:
        """The offset of the first intact (not damaged) record after ``g_off`` (found from
        the table, not from a column of every intact offset: 8 bytes a message, issue 39)."""
        i = int(np.searchsorted(self.offs, g_off, side="right")) if self.n_rec else 0
        while i < self.n_rec:
            w = self.recs.flags[i : i + 4096]
            k = np.flatnonzero((w & DAMAGED) == 0)
            if len(k):
                return int(self.offs[i + int(k[0])])
            i += len(w)
        return None

    def in_file_after(self, fs: FileScan, pos: int) -> np.ndarray:
        """Positions of the intact records of ``fs``'s file after ``pos``."""
        o = self.offs[self.recs.file_idx == fs.idx] - fs.file.base
        out: np.ndarray = o[o > pos]
        return out

    def unfillable(self, file_base: int, g_off: int) -> str:
        """Why repair cannot keep what follows a stop at g_off: the bytes up to the next
        intact record (same file) are fewer than the smallest record the walk accepts."""
        nxt, min_rec = self.next_intact(g_off), self.min_rec
        if nxt is None:
            return ""
        if nxt >= file_base + self.mapped or nxt - g_off >= min_rec:
            return ""
        return (
            f"rmqtool repair cannot keep them either: the {nxt - g_off} bytes from here to the next intact record "
            f"(offset {nxt}) are fewer than the smallest record the broker's walk accepts ({min_rec} bytes), "
            "and a BLANK there would end this file's walk"
        )

    def file(self, fs: FileScan) -> None:
        """The findings about one file's walk."""
        short = fs.file.size < self.mapped
        gap_at = {g.start: g for g in fs.gaps}
        for e in fs.events:
            if e.reason == ck.BLANK:
                self._blank(fs, e)
            elif e.reason == ck.END_OF_DATA:
                self._end_of_data(fs, e, gap_at.get(e.pos))
            else:
                g = gap_at.get(e.pos)
                if short and e.reason == ck.SHORT and g is not None and g.end >= fs.end:
                    continue  # the file is truncated: FILE_WRONG_SIZE says so
                self._failure(fs, e, short)
        base = fs.file.base
        if fs.stop is None and not short and fs.end == self.mapped:
            n_after = self.after(base + fs.end - 1)
            if n_after:
                self.out.append(
                    finding(
                        FindingCode.CL_DATA_AFTER_END,
                        fs.rel,
                        fs.end,
                        base + fs.end,
                        f"the file has no BLANK record at its end: the record walk stops there, {n_after} intact records follow in later files",
                        records_after=n_after,
                    )
                )
        if fs.stop is not None:
            self._salvageable(fs, fs.stop)

    def _blank(self, fs: FileScan, e: Event) -> None:
        rel, g_off, mapped = fs.rel, fs.file.base + e.pos, self.mapped
        total = int(e.info.get("total_size", 0))
        if total != mapped - e.pos:
            self.out.append(
                finding(
                    FindingCode.CL_BAD_BLANK,
                    rel,
                    e.pos,
                    g_off,
                    f"BLANK record says {total} bytes remain, the file has {mapped - e.pos} after it",
                    total_size=total,
                )
            )
        hidden = self.in_file_after(fs, e.pos)
        if len(hidden):
            self.out.append(
                finding(
                    FindingCode.CL_DATA_AFTER_END,
                    rel,
                    e.pos,
                    g_off,
                    f"the record walk ends at a BLANK record (the broker goes on at the next file), but {len(hidden)} intact records follow in this file (next at {int(hidden[0])})",
                    records_after=int(len(hidden)),
                    next_record_offset=fs.file.base + int(hidden[0]),
                    broker_stop=e.main,
                )
            )

    def _end_of_data(self, fs: FileScan, e: Event, g: Gap | None) -> None:
        rel, base, offs, recs = fs.rel, fs.file.base, self.offs, self.recs
        g_off = base + e.pos
        n_after = self.after(g_off)
        if n_after:
            nxt = int(offs[np.searchsorted(offs, g_off, side="right")])
            self.out.append(
                finding(
                    FindingCode.CL_DATA_AFTER_END,
                    rel,
                    e.pos,
                    g_off,
                    f"the record walk ends at an all-zero header, but {n_after} intact records follow (next at offset {nxt})",
                    records_after=n_after,
                    next_record_offset=nxt,
                    broker_stop=e.main,
                )
            )
            return
        if g is not None and g.first_nonzero >= 0:
            self.out.append(
                finding(
                    FindingCode.CL_GARBAGE_AFTER_END,
                    rel,
                    g.first_nonzero,
                    base + g.first_nonzero,
                    f"non-zero bytes after the end of the data (from {g.first_nonzero} to {g.end}) hold no intact record",
                    region_end=g.end,
                )
            )
        k = int(np.searchsorted(offs, g_off)) - 1 if self.n_rec else -1
        if k >= 0 and int(offs[k]) + int(recs.size[k]) == g_off:
            zeros = _zeroed_properties_tail(fs.file.path, int(offs[k]) - base, int(recs.size[k]))
            if zeros:
                # (oracle soak seed 5089: a zeroed tail that began inside the last record's
                # properties; the broker keeps that record, and the acknowledged messages
                # after it leave no other trace)
                self.out.append(
                    finding(
                        FindingCode.CL_ZEROED_RECORD_TAIL,
                        rel,
                        int(offs[k]) - base,
                        int(offs[k]),
                        f"the last record of the data ends in {zeros} zero bytes inside its properties: "
                        "its tail was zeroed or its write torn; the broker keeps it with those properties, "
                        "and any records after it are gone",
                        zero_bytes=zeros,
                    )
                )

    def _failure(self, fs: FileScan, e: Event, short: bool) -> None:
        """A record that fails a check: kept under checkCRCOnRecover=false, torn at the
        end of the data, or where the walk stops (and what recovery cuts there)."""
        rel, base, out = fs.rel, fs.file.base, self.out
        g_off = base + e.pos
        info = dict(e.info)
        code = _REASON_CODES.get(e.reason, FindingCode.CL_BAD_LENGTH)
        what = _REASON_TEXT.get(e.reason, e.reason)
        where = f" ({info['topic']}/{info['queue_id']} queue offset {info['queue_offset']})" if "topic" in info else ""
        if e.reason in (ck.CRC, ck.PROP_CRC) and not self.profile.check_crc_on_recover:
            # checkCRCOnRecover=false: the broker's walk does not check it, keeps the
            # record and goes on (the recovery outlook walks on past it too)
            out.append(
                finding(
                    code,
                    rel,
                    e.pos,
                    g_off,
                    f"{what}{where}: the broker's recovery keeps this record "
                    "(checkCRCOnRecover=false: its walk checks no CRC) and serves its damaged bytes",
                    reason=e.reason,
                    field=e.field,
                    broker_stop=False,
                    **info,
                )
            )
            return
        # (only where the recovery walk stops: each file's own walk stops too)
        q10 = ck.start_aborting_size(fs.file.path, e.pos, self.profile) if e.main and self.po == g_off else 0
        if not q10 and self.after(g_off) == 0 and self.abort and e.kind in ("gap", "damaged") and not short:
            out.append(self._torn(rel, e, g_off, info, what, where))
            return
        stops = "the broker's record walk stops here" if e.main else "after earlier damage"
        if q10:
            stops = (
                f"the broker's start aborts at this record (TOTALSIZE {q10}: no JVM array holds it, "
                "OutOfMemoryError, quirk Q10): it does not start until the record is cut"
            )
        cut = ""
        if e.main and self.po == g_off:
            n_cut = self.outlook[self.mode]["records_cut"]
            why = self.unfillable(base, g_off)
            cut = f"; recovery cuts {n_cut} intact records" + (
                f" ({n_cut} intact messages after this record; {why or 'rmqtool repair keeps them'})" if n_cut else ""
            )
        out.append(
            finding(
                code,
                rel,
                e.pos,
                g_off,
                f"{what}{where}: {stops}{cut}",
                reason=e.reason,
                field=e.field,
                broker_stop=e.main,
                **info,
            )
        )

    @staticmethod
    def _torn(rel: str, e: Event, g_off: int, info: dict[str, Any], what: str, where: str) -> Finding:
        """The last record of the data, unreadable after a crash: a torn message (its
        header readable) or a torn tail."""
        if "queue_offset" in info:  # a message header: the message is lost
            topic = info.get("topic")
            who = (
                (f"{topic}/{info['queue_id']}" if topic is not None else f"queue {info['queue_id']}")
                + f" queue offset {info['queue_offset']}"
                + (f", msg id {info['msg_id']}" if info.get("msg_id") else "")
            )
            return finding(
                FindingCode.CL_TORN_MESSAGE,
                rel,
                e.pos,
                g_off,
                f"the last record of the data ({who}) fails the broker's check ({what}): "
                "recovery cuts it and the message is lost",
                reason=e.reason,
                field=e.field,
                **info,
            )
        return finding(
            FindingCode.CL_TORN_TAIL,
            rel,
            e.pos,
            g_off,
            f"the last record of the data is unreadable ({what}){where}: recovery cuts it",
            reason=e.reason,
            field=e.field,
            **info,
        )

    def _salvageable(self, fs: FileScan, stop: Event) -> None:
        """Intact records beyond the broker's stop in this file (and later ones)."""
        recs, mode, base = self.recs, self.mode, fs.file.base
        sp = stop.pos
        inside = self.in_file_after(fs, sp)
        later = int(np.count_nonzero(recs.file_idx > fs.idx)) if self.n_rec and stop.reason != ck.BLANK else 0
        if not (len(inside) or later):
            return
        g_stop = base + sp
        thrown = 0
        if self.po is not None and self.po == g_stop:
            thrown = int(self.outlook[mode]["records_cut"])  # intact records, as recover counts them
        sample = [int(x) for x in inside[:50]]
        why = self.unfillable(base, g_stop) if thrown else ""
        fate = (
            f"the broker's {mode} recovery stops here and throws away {thrown} of them "
            f"({why or 'rmqtool repair keeps them'})"
            if thrown
            else "the broker skips them (it goes on at the next file)"
            if stop.reason == ck.BLANK
            else f"the broker's {mode} recovery does not stop here"
        )
        self.out.append(
            finding(
                FindingCode.CL_SALVAGEABLE_RECORDS,
                fs.rel,
                sp,
                g_stop,
                f"{len(inside)} intact records in this file after the stop at {sp}"
                + (f" and {later} in later files" if later else "")
                + f"; {fate}",
                in_file=len(inside),
                in_later_files=later,
                positions=sample,
                positions_truncated=len(inside) > len(sample),
                runs=_record_runs(recs, fs, sp),
                broker_discards=thrown,
                recovery_mode=mode,
            )
        )


def commitlog_findings(
    store: Store,
    profile: BrokerProfile,
    scans: Sequence[FileScan | None],
    recs: Records,
    outlook: dict[str, Any],
    spans: Spans | None = None,
) -> list[Finding]:
    check = _ClCheck(store, profile, recs, outlook)
    for fs in scans:
        if fs is not None:
            check.file(fs)
    return check.out + _record_anomalies(store, profile, scans, recs, spans)


def _record_runs(recs: Records, fs: FileScan, after: int, limit: int = 100) -> list[list[int]]:
    """Intact records of a file after position ``after`` as runs of back-to-back records:
    [first position, end position, count] (every record's offset, compactly)."""
    sel = np.flatnonzero(recs.file_idx == fs.idx)
    pos = recs.off[sel] - fs.file.base
    keep = pos > after
    pos, size = pos[keep], recs.size[sel][keep].astype(np.int64)
    if not len(pos):
        return []
    brk = np.flatnonzero(pos[1:] != pos[:-1] + size[:-1]) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [len(pos)]))
    return [
        [int(pos[a]), int(pos[b - 1] + size[b - 1]), int(b - a)]
        for a, b in zip(starts[:limit].tolist(), ends[:limit].tolist())
    ]


def walk_summary(store: Store, scans: Sequence[FileScan | None], recs: Records) -> list[dict[str, Any]]:
    """Per commitlog file: where the broker's record walk stops and what lies after."""
    out = []
    counts = (
        np.bincount(recs.file_idx, minlength=len(store.commitlog))
        if len(recs)
        else np.zeros(len(store.commitlog), dtype=np.int64)
    )
    for k, f in enumerate(store.commitlog):
        fs = scans[k] if k < len(scans) else None
        row: dict[str, Any] = {"file": rel_path(store, f.path), "size": f.size}
        if fs is None:
            row.update(records=0, stop=None, stop_reason="EMPTY_FILE", after="nothing")
            out.append(row)
            continue
        stop = fs.stop
        row["records"] = fs.main_count
        row["stop"] = stop.pos if stop is not None else fs.end
        row["stop_reason"] = stop.reason if stop is not None else "END_OF_FILE"
        intact_after = int(counts[k]) - fs.main_count
        if stop is not None and stop.reason == ck.BLANK and not intact_after:
            row["after"] = "end of file (BLANK)"
        elif intact_after:
            row["after"] = f"{intact_after} intact record(s)"
        elif any(g.first_nonzero >= 0 for g in fs.gaps):
            row["after"] = "non-zero bytes, no intact record"
        else:
            row["after"] = "zeros"
        out.append(row)
    return out


CONTINUITY_CHUNK = 1 << 20  # records per step of the QUEUEOFFSET continuity check


def _record_anomalies(
    store: Store, profile: BrokerProfile, scans: Sequence[FileScan | None], recs: Records, spans: Spans | None = None
) -> list[Finding]:
    out: list[Finding] = []
    files = store.commitlog
    rels = [rel_path(store, f.path) for f in files]
    bases = np.array([f.base for f in files] or [0], dtype=np.int64)
    sysflag: dict[tuple[int, str], list[Any]] = {}
    for fidx, code, pos, msg, det in recs.anomalies:
        if code == FindingCode.CL_SYSFLAG:  # counted per part: one finding per file and kind
            k = (fidx, det["reason"])
            if k in sysflag:
                sysflag[k][1] += det["count"]
            else:
                sysflag[k] = [pos, det["count"], det["sys_flag"]]
            continue
        out.append(finding(code, rels[fidx], pos, int(bases[fidx]) + pos, msg, **det))
    for (fidx, why), (pos, count, sf0) in sysflag.items():
        out.append(
            finding(
                FindingCode.CL_SYSFLAG,
                rels[fidx],
                pos,
                int(bases[fidx]) + pos,
                f"{why} in {count} record(s), first SYSFLAG 0x{sf0:X}",
                count=count,
                reason=why,
            )
        )
    n = len(recs)
    if not n:
        return out
    # QUEUEOFFSET continuity per queue (records that go to a consume queue, not inner batches),
    # CONTINUITY_CHUNK records at a time in offset order: each queue's last record carries
    # over from chunk to chunk (its working arrays are per chunk, not per message, issue 39)
    nq = len(recs.queues)
    last_qo = np.zeros(nq, dtype=np.int64)
    last_off = np.zeros(nq, dtype=np.int64)
    seen = np.zeros(nq, dtype=bool)
    breaks = np.zeros(nq, dtype=np.int64)
    first: dict[int, tuple[int, int, int]] = {}  # queue key -> (previous, value, record) of its first break
    step = max(1, CONTINUITY_CHUNK)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        fl = recs.flags[lo:hi]
        sel = np.flatnonzero(to_queue(fl) & ((fl & INNER_BATCH) == 0))
        del fl
        if not len(sel):
            continue
        sel += lo
        qk_sel = recs.qkey[sel]
        order = sel[np.argsort(qk_sel.astype(np.int16) if nq < 32768 else qk_sel, kind="stable")]
        del sel, qk_sel
        qk = recs.qkey[order]
        qo = recs.queue_offset[order]
        off = recs.off[order]
        head = np.ones(len(qk), dtype=bool)  # the first of its queue in this chunk
        head[1:] = qk[1:] != qk[:-1]
        prev_qo = np.empty_like(qo)
        prev_qo[1:] = qo[:-1]
        prev_off = np.empty_like(off)
        prev_off[1:] = off[:-1]
        hq = qk[head]
        prev_qo[head] = last_qo[hq]
        prev_off[head] = last_off[hq]
        has_prev = np.ones(len(qk), dtype=bool)
        has_prev[head] = seen[hq]
        tail = np.ones(len(qk), dtype=bool)  # the last of its queue in this chunk
        tail[:-1] = head[1:]
        tq = qk[tail]
        last_qo[tq], last_off[tq], seen[tq] = qo[tail], off[tail], True
        brk = np.flatnonzero(has_prev & (qo != prev_qo + 1))
        del head, has_prev, tail
        if len(brk) and spans is not None and len(spans.starts):
            # a jump over a damaged region is explained by the finding about that region
            a, b = prev_off[brk], off[brk]
            at = np.searchsorted(spans.starts, a, side="right")
            over = (at < len(spans.starts)) & (spans.starts[np.minimum(at, len(spans.starts) - 1)] < b)
            brk = brk[~over]
        if len(brk):
            bq = qk[brk]
            breaks += np.bincount(bq, minlength=nq)
            for bi, q in zip(brk.tolist(), bq.tolist()):
                if q not in first:
                    first[q] = (int(prev_qo[bi]), int(qo[bi]), int(order[bi]))
    for q in sorted(first):
        prev, value, i = first[q]
        fi = int(recs.file_idx[i])
        t, qid = recs.queues[q]
        nb = int(breaks[q])
        out.append(
            finding(
                FindingCode.CL_QUEUE_OFFSET,
                rels[fi],
                int(recs.off[i] - bases[fi]),
                int(recs.off[i]),
                f"{t}/{qid}: QUEUEOFFSET goes from {prev} to {value} ({nb} break(s) in this queue)",
                topic=t,
                queue_id=qid,
                breaks=nb,
                previous=prev,
                value=value,
            )
        )
    return out
