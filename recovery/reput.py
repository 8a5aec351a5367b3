"""The reput pass: ConsumeQueue and Index rebuilt from the commitlog, as the broker's
``ReputMessageService.doReput`` and dispatcher chain build them (RECOVERY.md §9).

* :func:`iter_dispatch` walks the commitlog the way ``doReput`` does (RECOVERY §9.5):
  region by region (a file from the reput offset to its end, or to ``to_offset``), every
  record checked with ``checkMessageAndReturnSize(checkCRC=false, readBody=false)``
  (:func:`recovery.check.check_record`), BLANK -> next file, ``(N, False)`` -> the
  ``[BUG]`` accounting quirk Q13, ``(-1, False)`` -> the rest of the region skipped (what a
  master broker does). It yields the dispatch requests in column form
  (:class:`DispatchColumns`). Damage is recorded as :class:`ReputProblem`, never raised.
* The fast path (default) finds record boundaries with one ``struct`` unpack per record,
  then decodes whole runs of records with numpy gathers over the memory map (the header
  layout is derived from ``formats.commitlog.MESSAGE_V1``) and finds TAGS, KEYS, UNIQ_KEY
  and DELAY with one regular-expression pass over the runs' properties. Any record it is
  not sure about (IPv6 hosts, V2, a length that does not add up, a DELAY to parse, a 5.x
  inner batch, a legacy-parser ambiguity) is decided by ``check_record``; a test asserts
  that both paths dispatch exactly the same requests.
* :func:`load_state` reads what the broker would continue from at start-up: each consume
  queue after ``ConsumeQueue.recover`` (RECOVERY §3) and the index files after
  ``IndexService.load`` (§8).
* :func:`reput` feeds :mod:`recovery.indexbuild`'s ``ConsumeQueueSet`` and
  ``IndexBuilder`` and returns the resulting files and checkpoint timestamps
  (:class:`ReputResult`); it writes nothing.

Deviation from the broker, by design: new index files are named after the store timestamp
of the record whose dispatch created them (``formats.names.index_file_name`` in a chosen
time zone, UTC by default), bumped by 1 ms when needed so names stay unique and ascending;
the broker uses its wall clock at creation (STORE_FORMAT §2.2, RECOVERY §14.4).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from ..formats import commitlog as cl
from ..formats.checkpoint import Checkpoint
from ..formats.consumequeue import CQ_UNIT_SIZE, read_units
from ..formats.indexfile import HEADER_SIZE, HEADER_STRUCT
from ..formats.javahash import tags_code as _tags_code
from ..formats.names import index_file_name, offset_to_file_name
from ..formats.schema import fixed_prefix_format
from . import check as ck
from .indexbuild import ConsumeQueueSet, ConsumeQueueWriter, DispatchRequest, IndexBuilder, IndexFileImage
from .store import Store, StoreFile
from .versions import BrokerProfile

Progress = Callable[[int], None]

__all__ = [
    "DispatchColumns",
    "ReputProblem",
    "ReputStats",
    "QueueState",
    "IndexState",
    "ReputState",
    "CqFileOut",
    "IndexFileOut",
    "ReputResult",
    "iter_dispatch",
    "load_state",
    "reput",
    "parse_index_file_name",
    "updated_checkpoint",
]

SCHEDULE_TOPIC = ck.SCHEDULE_TOPIC

# problem codes beyond check.py's reason codes
FILE_GAP = "COMMITLOG_FILE_GAP"  # no commitlog file holds the reput offset
STOPPED = "REPUT_STOPPED"  # 5.x: a record crosses the end of the confirmed range


# ---------------------------------------------------------------------------------------
# Dispatch requests in column form


class DispatchColumns(NamedTuple):
    """A run of dispatch requests (the broker's ``DispatchRequest``), one row per valid
    record, in commitlog order. ``position`` is where the record was read (file base +
    position in the file); ``commitlog_offset`` is its PHYSICALOFFSET *field*, which the
    broker uses for the CQ and index entries (RECOVERY §2 notes)."""

    position: np.ndarray
    topic: list[str]
    queue_id: np.ndarray
    commitlog_offset: np.ndarray
    msg_size: np.ndarray
    tags_code: np.ndarray
    store_timestamp: np.ndarray
    consume_queue_offset: np.ndarray
    keys: list[str | None]
    uniq_key: list[str | None]
    sys_flag: np.ndarray

    @property
    def count(self) -> int:
        return len(self.topic)

    def select(self, mask: np.ndarray) -> "DispatchColumns":
        """The rows where ``mask`` is True."""
        idx = np.flatnonzero(mask).tolist()
        return DispatchColumns(
            self.position[mask], [self.topic[i] for i in idx], self.queue_id[mask],
            self.commitlog_offset[mask], self.msg_size[mask], self.tags_code[mask],
            self.store_timestamp[mask], self.consume_queue_offset[mask],
            [self.keys[i] for i in idx], [self.uniq_key[i] for i in idx], self.sys_flag[mask],
        )

    def requests(self) -> Iterator[DispatchRequest]:
        """The rows as :class:`recovery.indexbuild.DispatchRequest` objects."""
        for i in range(self.count):
            yield DispatchRequest(
                self.topic[i], int(self.queue_id[i]), int(self.commitlog_offset[i]), int(self.msg_size[i]),
                int(self.tags_code[i]), int(self.store_timestamp[i]), int(self.consume_queue_offset[i]),
                self.keys[i], self.uniq_key[i], int(self.sys_flag[i]),
            )

    @staticmethod
    def from_rows(positions: Sequence[int], rows: Sequence[DispatchRequest]) -> "DispatchColumns":
        i64 = lambda xs: np.fromiter(xs, dtype=np.int64, count=len(rows))  # noqa: E731
        return DispatchColumns(
            i64(positions), [r.topic for r in rows], i64(r.queue_id for r in rows),
            i64(r.commitlog_offset for r in rows), i64(r.msg_size for r in rows),
            i64(r.tags_code for r in rows), i64(r.store_timestamp for r in rows),
            i64(r.consume_queue_offset for r in rows), [r.keys for r in rows],
            [r.uniq_key for r in rows], i64(r.sys_flag for r in rows),
        )

    @staticmethod
    def concat(parts: Sequence["DispatchColumns"]) -> "DispatchColumns":
        if not parts:
            return DispatchColumns.from_rows([], [])
        out: list[Any] = []
        for i, name in enumerate(DispatchColumns._fields):
            vals = [p[i] for p in parts]
            if isinstance(vals[0], list):
                out.append([x for v in vals for x in v])
            else:
                out.append(np.concatenate(vals))
        return DispatchColumns(*out)


def _request_of(c: ck.Checked) -> DispatchRequest:
    r = c.rec
    assert r is not None
    return DispatchRequest(r.topic, r.queue_id, r.physical_offset, r.total_size, c.tags_code,
                           r.store_timestamp, r.queue_offset, c.keys, c.uniq_key, r.sys_flag)


# ---------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True)
class ReputProblem:
    """Something the reput could not dispatch: ``code`` (a ``check.py`` reason code such as
    BAD_MAGIC, SIZE_MISMATCH, TRUNCATED, or COMMITLOG_FILE_GAP), the commitlog file
    (relative to the store), the physical offset where it was met and how many bytes the
    reput skipped because of it."""

    code: str
    path: str
    offset: int
    skipped: int
    message: str

    def one_line(self) -> str:
        return f"{self.path} at offset {self.offset}: {self.message}"


@dataclass
class ReputStats:
    """Counters of one reput pass."""

    from_offset: int = 0  # where the reput started
    end_offset: int = 0  # the reput offset when it finished (reputFromOffset)
    records: int = 0  # valid records walked (every (N, True) outcome)
    dispatched: int = 0  # records handed to the dispatchers (after the topic filter)
    cq_records: int = 0  # records of CQ transaction types (NOT_TYPE, COMMIT) dispatched
    cq_units: int = 0  # CQ units appended (fill-blank units included)
    index_records: int = 0  # records handed to the index dispatcher
    index_keys: int = 0  # index entries written
    index_skipped: int = 0  # records skipped by the endPhyOffset test (already indexed)
    blanks: int = 0
    commitlog_bytes: int = 0  # bytes of commitlog regions walked
    files: int = 0  # commitlog regions walked
    seconds_walk: float = 0.0
    seconds_cq: float = 0.0
    seconds_index: float = 0.0

    @property
    def seconds(self) -> float:
        return self.seconds_walk + self.seconds_cq + self.seconds_index


# ---------------------------------------------------------------------------------------
# The fast decoder: numpy over the memory map


def _np_dtype_of(fmt: str, names: list[str]) -> np.dtype:
    codes = re.findall(r"(\d*)([a-zA-Z])", fmt.lstrip("<>!=@"))
    fields = []
    for (count, code), name in zip(codes, names):
        if code == "s":
            fields.append((name, f"S{int(count or 1)}"))
        elif code in "lq":
            fields.append((name, {"l": ">i4", "q": ">i8"}[code]))
        elif code == "h":
            fields.append((name, ">i2"))
        elif code == "b":
            fields.append((name, "i1"))
        else:  # pragma: no cover - the schema uses only the codes above
            raise RuntimeError(f"unexpected struct code {code!r} in {fmt}")
    dt = np.dtype(fields)
    if dt.itemsize != cl.LAYOUTS[(cl.MAGIC_V1, 0)].header.size:  # pragma: no cover
        raise RuntimeError("derived header dtype does not match the struct layout")
    return dt


# The IPv4/IPv4 V1 header up to BODYLENGTH, derived from the schema like formats.commitlog.LAYOUTS.
_HDR_FMT, _HDR_NAMES = fixed_prefix_format(cl.MESSAGE_V1, {"sys_flag": 0})
_HDR_DTYPE = _np_dtype_of(_HDR_FMT, _HDR_NAMES)
_HDR_SIZE = _HDR_DTYPE.itemsize  # 88
_HDR_AR = np.arange(_HDR_SIZE, dtype=np.int64)
_FIXED_V1_V4 = cl.cal_msg_length(False, 0, 0, 0, 0)  # 91: everything but body, topic, properties
_AR2 = np.arange(2, dtype=np.int64)

# Properties of interest, matched at the start of a 0x02-delimited segment; a run's
# properties are joined with 0x02 (and one leading 0x02), so every segment, the first of a
# record included, starts right after a 0x02. Empty values are not accepted by either parser.
_PROPS_RX = re.compile(rb"\x02(TAGS|KEYS|UNIQ_KEY|DELAY|INNER_NUM|INNER_BASE)\x01([^\x02]+)")
_MAX_RUN = 1 << 15  # records decoded per numpy run (bounds temporary memory)


class _FastDecoder:
    """Per-walk caches for the fast path."""

    def __init__(self, profile: BrokerProfile, max_delay_level: int) -> None:
        self.profile = profile
        self.max_delay_level = max_delay_level
        self.topics: dict[bytes, str] = {}
        self.tags: dict[bytes, int] = {}
        self.legacy = not profile.new_properties_parser
        self.is5 = profile.is_5x

    def boundaries(self, buf: Any, start: int, end: int) -> list[int]:
        """Positions of consecutive V1 records from ``start`` trusting TOTALSIZE; stops at
        anything else (that spot is then checked by ``check_record``)."""
        unpack = cl.PREFIX.unpack_from
        v1 = cl.MAGIC_V1
        out: list[int] = []
        app = out.append
        pos = start
        lim = end - 8
        n = 0
        while pos <= lim and n < _MAX_RUN:
            total, magic = unpack(buf, pos)
            if magic != v1 or total <= 0:
                break
            nxt = pos + total
            if nxt > end:
                break
            app(pos)
            pos = nxt
            n += 1
        return out

    def decode(self, buf: Any, arr: np.ndarray, starts: list[int], end: int, base: int) -> tuple[DispatchColumns, np.ndarray]:
        """Decode the records at ``starts`` (all with V1 magic and a TOTALSIZE that fits).
        Returns (cols, sure): ``cols`` holds every record's fields as the fast path
        read them, ``sure[i]`` says whether record i is certainly ``(N, True)`` with exactly
        those fields; the caller asks ``check_record`` about the others."""
        n = len(starts)
        P = np.fromiter(starts, dtype=np.int64, count=n)
        last = len(arr) - 1
        idx = P[:, None] + _HDR_AR
        if int(P[-1]) + _HDR_SIZE > len(arr):
            np.minimum(idx, last, out=idx)
        H = arr[idx].view(_HDR_DTYPE).reshape(n)
        total = H["total_size"].astype(np.int64)
        sys_flag = H["sys_flag"].astype(np.int64)
        body_len = H["body_length"].astype(np.int64)
        sure = ((sys_flag & 0x30) == 0) & (P + _HDR_SIZE <= end)
        p1 = P + _HDR_SIZE + np.maximum(body_len, 0)  # TOPICLENGTH
        sure &= p1 + 1 <= end
        tl = arr[np.minimum(p1, last)].view(np.int8).astype(np.int64)
        sure &= tl >= 0
        p2 = p1 + 1 + tl  # PROPERTIESLENGTH
        sure &= p2 + 2 <= end
        pidx = np.minimum(p2[:, None] + _AR2, last)
        pl = arr[pidx].view(">i2").reshape(n).astype(np.int64)
        sure &= _FIXED_V1_V4 + np.maximum(body_len, 0) + tl + np.maximum(pl, 0) == total
        # where the fields are not sure, keep the slices in range (check_record decides)
        tl = np.where(sure, tl, 0)
        p2 = np.where(sure, p2, p1)
        pl = np.where(sure, np.maximum(pl, 0), 0)
        t_a = (p1 + 1).tolist()
        t_b = (p1 + 1 + tl).tolist()
        p_a = (p2 + 2).tolist()
        p_b = (p2 + 2 + pl).tolist()

        # topics
        tbytes = [buf[a:b] for a, b in zip(t_a, t_b)]
        tcache = self.topics
        for tb in set(tbytes):
            if tb not in tcache:
                tcache[tb] = tb.decode("utf-8", "replace")
        topics = list(map(tcache.__getitem__, tbytes))

        # properties: one regex pass over the run
        pieces = [buf[a:b] for a, b in zip(p_a, p_b)]
        joined = b"\x02" + b"\x02".join(pieces)
        seg_start = np.empty(n, dtype=np.int64)
        seg_start[0] = 1
        if n > 1:
            np.cumsum(pl[:-1] + 1, out=seg_start[1:])
            seg_start[1:] += 1
        tags_v: dict[int, bytes] = {}
        keys_v: dict[int, bytes] = {}
        uniq_v: dict[int, bytes] = {}
        delay_v: dict[int, bytes] = {}
        odd: set[int] = set()
        matches = list(_PROPS_RX.finditer(joined))
        if matches:
            mstart = np.fromiter((m.start() for m in matches), dtype=np.int64, count=len(matches))
            rec_of = (np.searchsorted(seg_start, mstart + 1, side="right") - 1).tolist()
            legacy = self.legacy
            is5 = self.is5
            for m, r in zip(matches, rec_of):
                k, v = m.groups()
                if legacy and b"\x01" in v:
                    odd.add(r)  # the split parser treats extra 0x01 differently
                if k == b"TAGS":
                    tags_v[r] = v
                elif k == b"KEYS":
                    keys_v[r] = v
                elif k == b"UNIQ_KEY":
                    uniq_v[r] = v
                elif k == b"DELAY":
                    delay_v[r] = v
                elif is5:  # INNER_NUM / INNER_BASE: 5.x validates them (check_record)
                    odd.add(r)

        tags_code = np.zeros(n, dtype=np.int64)
        if tags_v:
            tc = self.tags
            ridx = list(tags_v)
            codes = []
            for r in ridx:
                v = tags_v[r]
                c = tc.get(v)
                if c is None:
                    c = tc[v] = _tags_code(v.decode("utf-8", "replace"))
                codes.append(c)
            tags_code[ridx] = codes
        store_ts = H["store_timestamp"].astype(np.int64)
        if delay_v:
            for r, v in delay_v.items():
                if topics[r] != SCHEDULE_TOPIC:
                    continue
                level = ck.java_parse_int(v.decode("utf-8", "replace"))
                if level is None:
                    odd.add(r)  # the record is invalid: check_record says so
                    continue
                if level > self.max_delay_level:
                    level = self.max_delay_level
                if level > 0:
                    tags_code[r] = int(store_ts[r]) + self.profile.delay_millis(level)
        keys: list[str | None] = [None] * n
        for r, v in keys_v.items():
            keys[r] = v.decode("utf-8", "replace")
        uniq: list[str | None] = [None] * n
        for r, v in uniq_v.items():
            uniq[r] = v.decode("utf-8", "replace")
        if odd:
            sure[list(odd)] = False
        cols = DispatchColumns(
            P + base, topics, H["queue_id"].astype(np.int64), H["physical_offset"].astype(np.int64),
            total, tags_code, store_ts, H["queue_offset"].astype(np.int64), keys, uniq, sys_flag,
        )
        return cols, sure


# ---------------------------------------------------------------------------------------
# The walk (ReputMessageService.doReput)


class _Walker:
    def __init__(
        self,
        store: Store,
        profile: BrokerProfile,
        from_offset: int | None,
        to_offset: int | None,
        max_delay_level: int | None,
        fast: bool,
        progress: Progress | None,
        problems: list[ReputProblem],
        stats: ReputStats,
    ) -> None:
        self.store = store
        self.profile = profile
        self.files = [f for f in store.commitlog if f.size > 0]
        self.bases = [f.base for f in self.files]
        self.F = store.geometry.commitlog_file_size
        self.from_offset = from_offset
        self.to_offset = to_offset
        self.mdl = profile.max_delay_level if max_delay_level is None else max_delay_level
        self.fast = _FastDecoder(profile, self.mdl) if fast else None
        self.progress = progress
        self.problems = problems
        self.stats = stats
        self._empty_after: dict[int, bool] = {}

    # -- helpers ------------------------------------------------------------------------
    def _rel(self, f: StoreFile) -> str:
        try:
            return f.path.relative_to(self.store.root).as_posix()
        except ValueError:
            return str(f.path)

    def _file_at(self, offset: int) -> int | None:
        """``findMappedFileByOffset``: index of the file whose range holds ``offset``."""
        i = bisect.bisect_right(self.bases, offset) - 1
        if i >= 0 and self.bases[i] <= offset < self.bases[i] + self.F:
            return i
        return None

    def _nothing_after(self, i: int) -> bool:
        """True when no file after file ``i`` starts with a record (all later files are
        empty or pre-allocated zeros): an END_OF_DATA stop in file ``i`` is then just the
        end of the commitlog's data."""
        if i not in self._empty_after:
            empty = True
            for f in self.files[i + 1 :]:
                with open(f.path, "rb") as fh:
                    head = fh.read(8)
                if head.strip(b"\0"):
                    empty = False
                    break
            self._empty_after[i] = empty
        return self._empty_after[i]

    def end_offset(self) -> int:
        """The reput's END: commitlog maxOffset (every file taken as full: no recovery has
        set the write position), or ``to_offset``."""
        if not self.files:
            return 0
        max_off = self.files[-1].base + self.F
        return max_off if self.to_offset is None else min(self.to_offset, max_off)

    # -- the walk -----------------------------------------------------------------------
    def run(self) -> Iterator[DispatchColumns]:
        if not self.files:
            self.stats.from_offset = self.stats.end_offset = 0
            return
        min_off = self.files[0].base
        reput_from = min_off if self.from_offset is None else max(self.from_offset, min_off)
        END = self.end_offset()
        self.stats.from_offset = reput_from
        while reput_from < END:
            i = self._file_at(reput_from)
            if i is None:
                # no file holds this offset: the broker's getData returns nothing and its reput
                # stops for good; offline we report the gap and go on with the next file
                j = bisect.bisect_right(self.bases, reput_from)
                nxt = self.bases[j] if j < len(self.bases) else END
                nxt = min(nxt, END)
                self.problems.append(ReputProblem(
                    FILE_GAP, "commitlog", reput_from, nxt - reput_from,
                    f"no commitlog file holds offset {reput_from}: {nxt - reput_from} bytes missing (the broker's reput would stop here)"))
                reput_from = nxt
                continue
            f = self.files[i]
            region_start = reput_from - f.base
            region_end = min(f.size, self.F, END - f.base)
            if region_start >= region_end:
                reput_from = f.base + self.F
                continue
            with self.store.map(f) as mf:
                buf = mf.buf
                reput_from, stop = yield from self._region(i, f, buf, region_start, region_end, reput_from, END)
                del buf
            self.stats.files += 1
            self.stats.commitlog_bytes += region_end - region_start
            if self.progress:
                self.progress(region_end - region_start)
            if stop:
                break
        self.stats.end_offset = reput_from

    def _region(self, i: int, f: StoreFile, buf: Any, start: int, end: int, reput_from: int, END: int) -> Iterator[DispatchColumns]:
        """One ``getData`` region: returns (new reput offset, stop-for-good)."""
        profile = self.profile
        size = end - start
        cursor = start
        read = 0
        rows: list[DispatchRequest] = []
        row_pos: list[int] = []
        fast = self.fast
        arr = np.frombuffer(buf, dtype=np.uint8) if fast is not None and len(buf) else None
        try:
            while read < size:
                if fast is not None and arr is not None and reput_from == f.base + cursor:
                    starts = fast.boundaries(buf, cursor, end)
                    if starts:
                        if rows:
                            yield DispatchColumns.from_rows(row_pos, rows)
                            rows, row_pos = [], []
                        cols, sure = fast.decode(buf, arr, starts, end, f.base)
                        k = len(starts)
                        if not sure.all():
                            cols, k = self._settle(buf, starts, end, cols, sure)
                        if k:
                            if k < len(starts):
                                cols = cols.select(np.arange(len(starts)) < k)
                            consumed = int(cols.msg_size.sum())
                            self.stats.records += k
                            reput_from += consumed
                            read += consumed
                            cursor += consumed
                            yield cols
                        if k == len(starts) and k == _MAX_RUN:
                            continue
                        if read >= size:
                            break
                c = ck.check_record(buf, cursor, end, profile, check_crc=False, read_body=False,
                                    max_delay_level=self.mdl)
                if c.ok and c.size > 0:
                    if profile.is_5x and reput_from + c.size > END:
                        self.problems.append(ReputProblem(
                            STOPPED, self._rel(f), reput_from, END - reput_from,
                            f"the record at {f.base + cursor} ends beyond the end offset {END}: the reput stops"))
                        return reput_from, True
                    rows.append(_request_of(c))
                    row_pos.append(f.base + cursor)
                    self.stats.records += 1
                    reput_from += c.size
                    read += c.size
                    cursor += c.size
                elif c.ok:  # BLANK: the rest of the file is not data
                    self.stats.blanks += 1
                    reput_from = reput_from + self.F - reput_from % self.F  # rollNextFile
                    read = size
                elif c.size > 0:
                    # (TOTALSIZE, False): "[BUG]read total count not equals msg total size";
                    # the offset moves by TOTALSIZE, the buffer cursor by the length read (Q13)
                    assert c.rec is not None
                    self.problems.append(ReputProblem(
                        c.reason, self._rel(f), f.base + cursor, c.size,
                        f"TOTALSIZE {c.size} does not match the record's fields ({c.rec.computed_size} bytes): not dispatched"))
                    reput_from += c.size
                    cursor += c.rec.computed_size
                else:
                    skipped = size - read
                    clean = c.reason == ck.END_OF_DATA and self._nothing_after(i)
                    if not clean and skipped > 0:
                        what = c.reason + (f" ({c.field})" if c.field else "")
                        self.problems.append(ReputProblem(
                            c.reason, self._rel(f), f.base + cursor, skipped,
                            f"unreadable record ({what}): the rest of this file, {skipped} bytes, is not dispatched"))
                    reput_from += skipped  # what a master broker does: skip the rest of the region
                    break
            if rows:
                yield DispatchColumns.from_rows(row_pos, rows)
            return reput_from, False
        finally:
            del arr

    def _settle(self, buf: Any, starts: list[int], end: int, cols: DispatchColumns, sure: np.ndarray) -> tuple[DispatchColumns, int]:
        """Ask ``check_record`` about the records the fast decoder was unsure of. Returns the
        corrected columns and how many leading records are valid (the walk continues
        through ``check_record`` at the first invalid one)."""
        fixes: list[tuple[int, DispatchRequest]] = []
        k = len(starts)
        for j in np.flatnonzero(~sure).tolist():
            c = ck.check_record(buf, starts[j], end, self.profile, check_crc=False, read_body=False,
                                max_delay_level=self.mdl)
            if c.ok and c.size > 0 and c.size == int(cols.msg_size[j]):
                fixes.append((j, _request_of(c)))
            else:
                k = j
                break
        for j, r in fixes:
            cols.topic[j] = r.topic
            cols.queue_id[j] = r.queue_id
            cols.commitlog_offset[j] = r.commitlog_offset
            cols.msg_size[j] = r.msg_size
            cols.tags_code[j] = r.tags_code
            cols.store_timestamp[j] = r.store_timestamp
            cols.consume_queue_offset[j] = r.consume_queue_offset
            cols.keys[j] = r.keys
            cols.uniq_key[j] = r.uniq_key
            cols.sys_flag[j] = r.sys_flag
        return cols, k


def iter_dispatch(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    max_delay_level: int | None = None,
    fast: bool = True,
    progress: Progress | None = None,
    problems: list[ReputProblem] | None = None,
    stats: ReputStats | None = None,
) -> Iterator[DispatchColumns]:
    """Every dispatch request of a reput pass from ``from_offset`` (default: the commitlog's
    min offset) to ``to_offset`` (default: the end of the last file; ``recover`` passes its
    processOffset), in commitlog order, in column form. Problems (damage the reput skips)
    are appended to ``problems``; ``stats`` is filled in. ``progress(n)`` is called with
    the commitlog bytes of each region walked. ``fast=False`` uses ``check_record`` for
    every record (the reference path)."""
    w = _Walker(store, profile, from_offset, to_offset, max_delay_level, fast, progress,
                problems if problems is not None else [], stats if stats is not None else ReputStats())
    return w.run()


# ---------------------------------------------------------------------------------------
# What the broker continues from (ConsumeQueue.recover, IndexService.load)


class QueueState(NamedTuple):
    """One consume queue after ``ConsumeQueue.recover`` (RECOVERY §3): the files kept, the
    last one's bytes and write position, maxPhysicOffset, and the files the recovery deletes
    (those after the write position)."""

    kept: list[StoreFile]
    last_bytes: bytes | None
    write_pos: int
    max_physic_offset: int
    dirty: list[StoreFile]


class IndexState(NamedTuple):
    """The index files after ``IndexService.load`` (RECOVERY §8): kept files (name order),
    the last kept file's bytes (continued by the next dispatch), the files the load deletes
    after an abnormal exit."""

    kept: list[StoreFile]
    last_bytes: bytes | None
    dirty: list[StoreFile]


@dataclass
class ReputState:
    """What the reput continues from. ``queues`` only lists queues that exist on disk;
    ``index`` None means: start without index files."""

    queues: dict[tuple[str, int], QueueState] = field(default_factory=dict)
    index: IndexState | None = None


def _recover_queue(files: list[StoreFile], F: int) -> QueueState:
    """``ConsumeQueue.recover``: scan from the third-last file; the first invalid unit (or
    the first file that is not entirely valid) is the write position; later files go."""
    good = [f for f in files if f.size > 0]
    if not good:
        return QueueState([], None, 0, -1, [f for f in files])
    i = max(0, len(good) - 3)
    max_phy = -1
    process = good[i].base
    in_file = 0
    data = b""
    while True:
        f = good[i]
        data = f.path.read_bytes()[:F].ljust(F, b"\0")
        units = read_units(data)
        valid = (units["commitlog_offset"] >= 0) & (units["size"] > 0)
        bad = np.flatnonzero(~valid)
        nvalid = int(bad[0]) if len(bad) else len(units)
        if nvalid:
            u = units[nvalid - 1]
            max_phy = int(u["commitlog_offset"]) + int(u["size"])
        in_file = nvalid * CQ_UNIT_SIZE
        process = f.base
        if in_file == F and i + 1 < len(good):
            i += 1
            continue
        break
    offset = process + in_file
    kept: list[StoreFile] = []
    dirty: list[StoreFile] = []
    last: StoreFile | None = None
    for f in files:
        if f.base + F > offset:
            if offset >= f.base:
                kept.append(f)
                last = f
            else:
                dirty.append(f)
        else:
            kept.append(f)
            last = f
    if last is None:
        return QueueState(kept, None, 0, max_phy, dirty)
    last_bytes = data if last.base == process else last.path.read_bytes()[:F].ljust(F, b"\0")
    return QueueState(kept, last_bytes, offset - last.base, max_phy, dirty)


def load_state(
    store: Store,
    profile: BrokerProfile,
    *,
    topics: Iterable[str] | None = None,
    cq: bool = True,
    index: bool = True,
) -> ReputState:
    """The consume queues (only ``topics``' if given) and index files as the broker would
    continue them after loading the store: ``ConsumeQueue.recover`` per queue and
    ``IndexService.load(lastExitOK = no abort file)``, which after an abnormal exit drops
    index files whose endTimestamp is later than the checkpoint's indexMsgTimestamp."""
    state = ReputState()
    F = store.geometry.cq_file_size
    wanted = set(topics) if topics is not None else None
    if cq:
        for (t, q), files in sorted(store.consume_queues.items()):
            if wanted is not None and t not in wanted:
                continue
            state.queues[(t, q)] = _recover_queue(files, F)
    if index:
        kept: list[StoreFile] = []
        dirty: list[StoreFile] = []
        ckpt = store.read_checkpoint()
        abnormal = store.abort_present
        for f in store.index_files:
            with open(f.path, "rb") as fh:
                hdr = HEADER_STRUCT.unpack(fh.read(HEADER_SIZE).ljust(HEADER_SIZE, b"\0"))
            end_ts = hdr[1]
            if abnormal and end_ts > ckpt.index_msg_timestamp:
                dirty.append(f)
                continue
            kept.append(f)
        last = kept[-1].path.read_bytes() if kept else None
        state.index = IndexState(kept, last, dirty)
    return state


# ---------------------------------------------------------------------------------------
# Results


class CqFileOut:
    """One consume queue file the reput created or appended to. ``data()`` builds its
    bytes (the full mapped size: zeros after the last unit, or the existing file's bytes
    outside the appended range)."""

    def __init__(self, relpath: str, queue: tuple[str, int], base: int, size: int, existed: bool,
                 stream: Callable[[], bytes], seg_start: int, template: bytes | None) -> None:
        self.relpath = relpath
        self.queue = queue
        self.base = base
        self.size = size
        self.existed = existed
        self._stream = stream
        self._seg_start = seg_start
        self._template = template

    def data(self) -> bytes:
        buf = bytearray(self._template) if self._template is not None else bytearray(self.size)
        stream = self._stream()
        lo = max(self.base, self._seg_start)
        hi = min(self.base + self.size, self._seg_start + len(stream))
        if lo < hi:
            buf[lo - self.base : hi - self.base] = stream[lo - self._seg_start : hi - self._seg_start]
        return bytes(buf)

    def __repr__(self) -> str:
        return f"CqFileOut({self.relpath!r}, existed={self.existed})"


class IndexFileOut:
    """One index file the reput created or continued: ``name`` (new files: named after the
    store timestamp of the record whose dispatch created them), the image
    (``recovery.indexbuild.IndexFileImage``; ``write_to(fileobj)`` streams the full file,
    ``to_bytes()`` builds it)."""

    def __init__(self, name: str, image: IndexFileImage, existed: bool) -> None:
        self.name = name
        self.image = image
        self.existed = existed

    @property
    def relpath(self) -> str:
        return f"index/{self.name}"

    @property
    def size(self) -> int:
        return self.image.size

    def write_to(self, fileobj: Any) -> None:
        self.image.write_to(fileobj)

    def data(self) -> bytes:
        return self.image.to_bytes()

    def __repr__(self) -> str:
        return f"IndexFileOut({self.name!r}, existed={self.existed}, entries={self.image.index_count - 1})"


@dataclass
class ReputResult:
    """What a reput pass produced. ``cq_files``: relpath ("consumequeue/<topic>/<q>/<name>")
    -> :class:`CqFileOut` for every CQ file created or appended to; ``cq_queues``: the queues
    the pass wrote, with the names of all their files afterwards; ``index_files``: the index
    files created or continued, in creation order; the checkpoint timestamps the broker
    would have (None: this pass does not change that field)."""

    cq_files: dict[str, CqFileOut]
    cq_queues: dict[tuple[str, int], list[str]]
    index_files: list[IndexFileOut]
    logics_msg_timestamp: int | None
    index_msg_timestamp: int | None
    stats: ReputStats
    problems: list[ReputProblem]
    cq_warnings: list[tuple[str, int, Any]]

    @property
    def dispatched(self) -> int:
        return self.stats.dispatched


def parse_index_file_name(name: str, tz: _dt.tzinfo | None = None) -> int | None:
    """Inverse of ``formats.names.index_file_name``: ms since the epoch, or None."""
    if len(name) != 17 or not name.isascii() or not name.isdigit():
        return None
    try:
        t = _dt.datetime(int(name[0:4]), int(name[4:6]), int(name[6:8]), int(name[8:10]),
                         int(name[10:12]), int(name[12:14]), tzinfo=tz or _dt.timezone.utc)
    except ValueError:
        return None
    return int(t.timestamp()) * 1000 + int(name[14:17])


def _name_new_index_files(images: list[IndexFileImage], floor_name: str | None, tz: _dt.tzinfo | None) -> list[str]:
    """Deterministic, unique, ascending names: each after its first record's store
    timestamp, bumped by 1 ms past ``floor_name`` and past the previous new name."""
    names: list[str] = []
    floor_ms: int | None = None
    if floor_name is not None:
        p = parse_index_file_name(floor_name, tz)
        floor_ms = p + 1 if p is not None else None
    for img in images:
        ms = img.first_store_timestamp if img.first_store_timestamp is not None else 0
        if floor_ms is not None and ms < floor_ms:
            ms = floor_ms
        name = index_file_name(ms, tz)
        while (floor_name is not None and name <= floor_name) or (names and name <= names[-1]):
            ms += 1
            name = index_file_name(ms, tz)
        names.append(name)
        floor_ms = ms + 1
    return names


def reput(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    topics: Iterable[str] | None = None,
    cq: bool = True,
    index: bool = True,
    state: ReputState | None = None,
    max_delay_level: int | None = None,
    index_tz: _dt.tzinfo | None = None,
    progress: Progress | None = None,
    fast: bool = True,
) -> ReputResult:
    """Run a reput pass and return the files it produced (nothing is written).

    ``state``: what to continue from (:func:`load_state`); None starts empty (a full
    rebuild: queues and index files are built from nothing). ``topics``: only records of
    these topics are dispatched. ``cq`` / ``index``: which dispatchers run.
    ``max_delay_level``: overrides the profile's (quirk Q1). ``index_tz``: time zone of new
    index file names (default UTC)."""
    stats = ReputStats()
    problems: list[ReputProblem] = []
    state = state if state is not None else ReputState()
    g = store.geometry
    F = g.cq_file_size
    wanted = set(topics) if topics is not None else None

    cqset: ConsumeQueueSet | None = None
    existing_last: dict[tuple[str, int], tuple[int, bytes, int]] = {}
    if cq:
        writers: dict[tuple[str, int], Any] = {}
        for key, qs in state.queues.items():
            if qs.kept and qs.last_bytes is not None:
                last = qs.kept[-1]
                existing_last[key] = (last.base, qs.last_bytes, qs.write_pos)
                writers[key] = ConsumeQueueWriter(F, [(last.base, qs.last_bytes, qs.write_pos)], qs.max_physic_offset)
        cqset = ConsumeQueueSet(F, writers)
    ib: IndexBuilder | None = None
    if index:
        last_bytes = state.index.last_bytes if state.index is not None else None
        ib = IndexBuilder(g.index_slot_num, g.index_num, existing_last=last_bytes,
                          count_every_put=profile.hash_slot_count_every_put)

    t_walk = time.perf_counter()
    t_cq = t_idx = 0.0
    for cols in iter_dispatch(store, profile, from_offset=from_offset, to_offset=to_offset,
                              max_delay_level=max_delay_level, fast=fast, progress=progress,
                              problems=problems, stats=stats):
        if wanted is not None:
            mask = np.fromiter((t in wanted for t in cols.topic), dtype=bool, count=cols.count)
            if not mask.all():
                cols = cols.select(mask)
        if cols.count == 0:
            continue
        stats.dispatched += cols.count
        if cqset is not None:
            t0 = time.perf_counter()
            tt = cols.sys_flag & 0xC
            stats.cq_records += int(((tt == 0) | (tt == 8)).sum())
            cqset.add_columns(cols.topic, cols.queue_id, cols.commitlog_offset, cols.msg_size,
                              cols.tags_code, cols.consume_queue_offset, cols.sys_flag, cols.store_timestamp)
            t_cq += time.perf_counter() - t0
        if ib is not None:
            t0 = time.perf_counter()
            stats.index_records += cols.count
            ib.add_columns(cols.topic, cols.commitlog_offset, cols.store_timestamp, cols.keys,
                           cols.uniq_key, cols.sys_flag)
            t_idx += time.perf_counter() - t0
    stats.seconds_cq = t_cq
    stats.seconds_index = t_idx
    stats.seconds_walk = time.perf_counter() - t_walk - t_cq - t_idx

    # -- consume queue files
    cq_files: dict[str, CqFileOut] = {}
    cq_queues: dict[tuple[str, int], list[str]] = {}
    logics: int | None = None
    warnings: list[tuple[str, int, Any]] = []
    if cqset is not None:
        logics = cqset.logics_msg_timestamp
        warnings = cqset.warnings
        for key, w in sorted(cqset.writers.items()):
            if w.appended_units == 0:
                continue
            stats.cq_units += w.appended_units
            topic, qid = key
            froms = w.file_froms()
            prior = existing_last.get(key)
            seg_start = prior[0] + prior[2] if prior is not None else froms[0]
            stream = _lazy_stream(w)
            names: list[str] = []
            for frm in froms:
                name = offset_to_file_name(frm)
                rel = f"consumequeue/{topic}/{qid}/{name}"
                existed = prior is not None and frm == prior[0]
                template = prior[1] if existed and prior is not None else None
                if frm + F <= seg_start:
                    continue
                cq_files[rel] = CqFileOut(rel, key, frm, F, existed, stream, seg_start, template)
                names.append(name)
            kept = [f.name for f in state.queues[key].kept] if key in state.queues else []
            cq_queues[key] = sorted(set(kept) | set(names))

    # -- index files
    index_files: list[IndexFileOut] = []
    index_ts: int | None = None
    if ib is not None:
        stats.index_keys = ib.keys_put
        stats.index_skipped = ib.records_skipped
        index_ts = ib.index_msg_timestamp
        kept_files = state.index.kept if state.index is not None else []
        floor = kept_files[-1].name if kept_files else None
        created = [img for img in ib.files if img.created]
        names = iter(_name_new_index_files(created, floor, index_tz))
        for img in ib.files:
            if img.created:
                index_files.append(IndexFileOut(next(names), img, False))
            elif img.puts and floor is not None:
                index_files.append(IndexFileOut(floor, img, True))

    return ReputResult(cq_files, cq_queues, index_files, logics, index_ts, stats, problems, warnings)


def _lazy_stream(w: ConsumeQueueWriter) -> Callable[[], bytes]:
    cache: list[bytes] = []

    def get() -> bytes:
        if not cache:
            cache.append(w.units().tobytes())
        return cache[0]

    return get


def updated_checkpoint(old: Checkpoint, result: ReputResult) -> Checkpoint:
    """The checkpoint after the pass: logicsMsgTimestamp := store time of the last record
    dispatched to a CQ, indexMsgTimestamp := endTimestamp of the last index file that
    became full (each only if the pass set it); physicMsgTimestamp and the 5.x fields stay."""
    cp = old
    if result.logics_msg_timestamp is not None:
        cp = cp._replace(logics_msg_timestamp=result.logics_msg_timestamp)
    if result.index_msg_timestamp is not None:
        cp = cp._replace(index_msg_timestamp=result.index_msg_timestamp)
    return cp
