"""The rows of ``dump commitlog`` and ``export``: the commitlog as the walker
(:mod:`recovery.walk`) finds it for them, one policy for both (:class:`RowWalk`), whose
items the writers render (dump's JSON lines and table, export's Arrow batches).

The walk of one file (or of one split of it) hands on, in order:

* a :class:`~recovery.batch.plainrun.PlainRun` for every *block*: a run of plain records
  (:mod:`recovery.batch.plainrun`: V1, IPv4 hosts, lengths that add up, body CRC, a
  printable ``NAME\\x01value`` properties shape shared by the run, ...) decoded at once;
  a writer may take fewer records of it (:attr:`Blocks.cut`, e.g. dump's digit tables
  print non-negative numbers only) and the walk goes on after those;
* a :class:`Plain` for a plain record taken one by one (``one_by_one``, dump:
  :func:`recovery.batch.plainrun.plain_record`, the same rule for one record of any
  host layout);
* ``(position, outcome)`` for every other record: the forensic walk's
  (:class:`recovery.walks.Forensic`: messages, a BLANK, damaged spots, resync past them).

Blocks are tried while they come; after a block attempt that takes too few records, the
next records go one by one for a while (256 records, doubling up to 65536 while blocks keep
failing); a record of another layout (V2, IPv6 hosts) goes alone to the one-by-one path;
dump tries a block again after every record the forensic rules take. The rows are the
same whichever path takes a record (the tests of dump's lines and of the Arrow batches assert it).

:func:`store_rows` walks a store's files for dump (:class:`Selection`: the position range
and filters of the command: blocks only where nothing is filtered out);
:func:`region_rows` walks one region of one file (an export split).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..formats import commitlog as cl
from ..formats.properties import JAVA_REPLACE
from . import check as ck
from .batch.plainrun import HSIZE, PlainFile, PlainRecord, PlainRun, plain_record, plain_run
from .framing import Framing
from .store import Store, StoreFile
from .versions import BrokerProfile
from .walk import UNLIMITED, Act, Policy, Run, Source, Walked, chain, store_framing, walk
from .walks import Forensic

__all__ = ["Blocks", "FileRows", "Plain", "RowWalk", "Selection", "region_rows", "run_starts", "store_rows"]

_V1 = cl.MAGIC_V1
_V1_BYTES = cl.MAGIC_V1.to_bytes(4, "big", signed=True)
_MAGIC_AT = cl.HEADER_OFFSETS[0]["magic"]
_HOSTS_AT = cl.HEADER_OFFSETS[0]["sys_flag"] + 3  # (SYSFLAG's last byte holds the host bits)


@dataclass
class Blocks:
    """How runs of plain records are taken as blocks: a block holds ``first`` records at
    first, at most ``most`` (``grow``: the size doubles while blocks run to their end,
    and comes back to twice the last block's otherwise), at least ``least``, and about
    ``max_bytes`` of the file at most; ``cut(run)``: the writer's own end of a run (it
    calls :meth:`PlainRun.cut`)."""

    first: int = 512
    most: int = 8192
    least: int = 8
    grow: bool = True
    max_bytes: int = UNLIMITED
    cut: Callable[[PlainRun], None] | None = None


FAIL_BUDGET = 256  # records one by one after a block attempt that took too few...
FAIL_BUDGET_MAX = 1 << 16  # ...doubling while blocks keep failing, up to this


class Plain(NamedTuple):
    """A plain record taken one by one: its position and what :func:`plain_record`
    decoded (header fields, topic bytes, property segments, properties)."""

    pos: int
    rec: PlainRecord


class FileRows(NamedTuple):
    """The walk enters a file: its name, offset and buffer (valid until the next
    :class:`FileRows`) and the store's framing."""

    file: StoreFile
    buf: Any
    end: int
    framing: Framing


@dataclass
class Selection:
    """What dump selects in one file: positions in ``[lo, hi)``, a topic, a queue id, a
    store time range ``[since, until]`` (None: no condition)."""

    lo: int = -1
    hi: int = UNLIMITED
    topic: str | None = None
    queue_id: int | None = None
    since: int | None = None
    until: int | None = None

    @property
    def content(self) -> bool:
        """Whether a condition looks into the records (not only at their positions)."""
        return self.topic is not None or self.queue_id is not None or self.since is not None or self.until is not None


class RowWalk(Forensic):
    """dump's and export's walk of one file (see the module docstring). ``blocks`` None:
    no blocks (every record one by one); ``one_by_one``: plain records one by one
    (dump's lines); ``select``: only the records it selects are handed on (dump's
    filters); ``again``: a block is tried again after every record the forensic rules
    take (dump)."""

    need = HSIZE
    min_total = HSIZE
    magics = (_V1,)

    def __init__(
        self,
        src: Source,
        blocks: Blocks | None,
        one_by_one: bool,
        select: Selection | None = None,
        again: bool = False,
    ) -> None:
        super().__init__()
        self.blocks = blocks
        self.batched = blocks is not None
        self.header = src.framing.header
        self.buf = src.buf
        self.end_ = src.end
        self.file = PlainFile(src.buf, src.end, src.profile.checks_inner_batch) if blocks is not None else None
        self.mv = memoryview(src.buf) if one_by_one else None
        self.is5 = src.profile.checks_inner_batch
        self.select = select
        self.again = again
        self.topics: dict[bytes, str] = {}
        self.fail_budget = FAIL_BUDGET
        self.made = False  # the current run made a block
        if blocks is not None:
            self.cap = blocks.first
            self.uniform = blocks.least
            self.run_bytes = blocks.max_bytes

    def release(self) -> None:
        if self.file is not None:
            self.file.release()
        if self.mv is not None:
            self.mv.release()

    # -- blocks ------------------------------------------------------------------------
    def runs(self, pos: int) -> bool:
        if not self.batched or self.wait > 0:
            return False
        at = pos + self.header
        buf = self.buf
        if at + _HOSTS_AT + 1 <= self.end_ and (
            buf[at + _MAGIC_AT : at + _MAGIC_AT + 4] != _V1_BYTES or buf[at + _HOSTS_AT] & 0x30
        ):
            # a record no block takes (V2, IPv6 hosts): it alone goes one by one, and the
            # next one gets a block again (one record of another layout among plain ones
            # must not end the blocks for a whole run)
            self.wait = 2
            return False
        return True

    def begin(self, src: Source, run: Run) -> None:
        self.made = False

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        blocks, file = self.blocks, self.file
        assert blocks is not None and file is not None
        limit = self.cap
        self.cap = blocks.first  # (unless this block runs to its end, below)
        pr = plain_run(file, run.P[i:k], blocks.least)
        if pr is not None and blocks.cut is not None:
            blocks.cut(pr)
        if pr is None or pr.n < blocks.least:
            return i, False
        n = pr.n
        self.made = True
        self.out.append(pr)
        self.fail_budget = FAIL_BUDGET
        if blocks.grow:
            self.cap = min(2 * limit, blocks.most) if n == limit else max(blocks.first, min(2 * n, blocks.most))
        else:
            self.cap = limit
        return i + n, False

    def end(self, src: Source, run: Run, k: int) -> None:
        if not self.made:  # too few records for a block: a while one by one
            self.wait = self.fail_budget
            self.fail_budget = min(self.fail_budget * 2, FAIL_BUDGET_MAX)
            if self.blocks is not None:
                self.cap = self.blocks.first
        self.made = False

    # -- one by one --------------------------------------------------------------------
    def inline(self, src: Source, pos: int) -> int:
        mv = self.mv
        at = pos + self.header
        if mv is None or at + HSIZE > src.end:
            return 0
        got = plain_record(src.buf, mv, at, src.end, self.is5)
        if got is None:
            return 0
        sel = self.select
        if sel is None or self._selected(sel, at, got):
            self.out.append(Plain(at, got))
        return self.header + got[0].total_size

    def _selected(self, sel: Selection, pos: int, got: PlainRecord) -> bool:
        h, tb = got[0], got[1]
        if not sel.lo <= pos < sel.hi:
            return False
        if sel.topic is not None:
            t = self.topics.get(tb)
            if t is None:
                t = self.topics[tb] = tb.decode("utf-8", JAVA_REPLACE)
            if t != sel.topic:
                return False
        return (
            (sel.queue_id is None or h.queue_id == sel.queue_id)
            and (sel.since is None or h.store_timestamp >= sel.since)
            and (sel.until is None or h.store_timestamp <= sel.until)
        )

    # -- the forensic rules ------------------------------------------------------------
    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if self.again:
            self.wait = 0  # (dump tries a block again at the next record)
        return super().decide(src, pos, c, j)

    def hand_on(self, pos: int, c: ck.Checked) -> None:
        sel = self.select
        if sel is None or sel.lo <= pos < sel.hi:
            self.out.append((pos, c))


def region_rows(
    buf: Any,
    end: int,
    base: int,
    profile: BrokerProfile,
    start: int,
    stop: int,
    blocks: Blocks | None,
    *,
    one_by_one: bool = False,
    select: Selection | None = None,
    again: bool = False,
    framing: Framing | None = None,
) -> Generator[Any, None, Walked]:
    """The rows of ``[start, stop)`` of one file (``start`` a record start), as
    :class:`RowWalk` hands them on; returns where the walk ended."""
    src = Source(buf, end, base, profile, framing)
    pol = RowWalk(src, blocks, one_by_one, select, again)
    try:
        return (yield from walk(src, pol, start, stop))
    finally:
        pol.release()
        src.release()


def store_rows(
    store: Store,
    profile: BrokerProfile,
    select: Selection,
    blocks: Blocks | None,
    *,
    start: int | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
) -> Iterator[Any]:
    """dump's rows of a store: for each commitlog file in ``[from_offset, to_offset)`` a
    :class:`FileRows`, then its rows (:func:`region_rows`: plain records one by one,
    blocks only in a file nothing is filtered out of, dump's filters ``select`` and the
    file's share of the offset range applied); ``start``: a record start to walk from (a
    seek's answer) instead of the beginning."""
    framing = store_framing(store)
    content = select.content
    for f in store.commitlog_in_range(start if start is not None else from_offset, to_offset):
        with store.map(f) as mf:
            end = mf.size
            sp = start - f.base if start is not None and f.base <= start < f.base + end else 0
            lo = -1 if from_offset is None else from_offset - f.base  # positions [lo, hi) of this file
            hi = end + 1 if to_offset is None else to_offset - f.base
            unfiltered = lo < 0 and hi > end and not content
            sel = None if unfiltered else Selection(lo, hi, select.topic, select.queue_id, select.since, select.until)
            yield FileRows(f, mf.buf, end, framing)
            yield from region_rows(
                mf.buf,
                end,
                f.base,
                profile,
                sp,
                end,
                blocks if unfiltered else None,
                one_by_one=True,
                select=sel,
                again=True,
                framing=framing,
            )


def run_starts(
    buf: Any,
    end: int,
    pos: int,
    stop: int,
    cap: int,
    least: int,
    profile: BrokerProfile,
    framing: Framing | None = None,
) -> Any:
    """The record starts of the run a block from ``pos`` is made of (what :class:`RowWalk`
    hands to :func:`~recovery.batch.plainrun.plain_run`): chained V1 records longer than
    their IPv4 header, each starting before ``stop`` with that header in the file, at most
    ``cap``; a run of one length taken at once when it holds at least ``least``."""
    src = Source(buf, end, 0, profile, framing)
    pol = Policy()
    pol.need, pol.min_total, pol.magics, pol.cap, pol.uniform = HSIZE, HSIZE, (_V1,), cap, least
    try:
        return chain(src, pos, stop, pol).P
    finally:
        src.release()
