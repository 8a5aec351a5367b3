"""The reput pass on several cores (:func:`iter_dispatch_parallel`): the commitlog cut into
pieces at record starts, the pieces walked by worker processes (:mod:`recovery.parallel`)
and handed on in commitlog order while each is one the sequential walk would have made."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NamedTuple, Unpack

import numpy as np

from .. import parallel as engine
from .. import transfer
from ..batch import DispatchColumns
from ..scan import last_nonzero_in_file
from ..store import Store, StoreFile
from ..transfer import Arena, Inherited, fork_context, inherited, install, place
from ..versions import BrokerProfile
from .model import ReputProblem, ReputStats, WalkArgs
from .walk import iter_dispatch

PIECE_SIZE = 64 << 20  # nominal bytes of commitlog per worker task
PARALLEL_MIN_BYTES = 48 << 20  # below this the pass runs in this process


class _Piece(NamedTuple):
    """One worker task: bytes ``[a, b)`` (physical offsets, nominal) of the commitlog
    file at ``base`` whose walked range is ``[lo, hi)``."""

    store: Store
    profile: BrokerProfile
    path: str
    base: int
    lo: int
    a: int
    b: int
    hi: int
    mdl: int | None
    tags: bool
    index_keys: bool
    hints: np.ndarray | Inherited | None  # the piece's hints, or the token of the parent's
    slot: int | None  # the arena slot its result goes to
    last: bool  # the last piece of its file's range


class _PieceResult(NamedTuple):
    start: int  # physical offset where the piece's walk began (None-free: empty pieces have start == stop)
    stop: int  # physical offset of the next piece's first record (or the end of the file's range)
    runs: list[DispatchColumns]
    problems: list[ReputProblem]
    stats: ReputStats


def _piece_task(t: _Piece) -> _PieceResult:
    """One piece of one commitlog file, walked by :func:`iter_dispatch` in a worker. The
    first piece of a file starts exactly at ``lo``; any other piece at its first record
    (the resync rule of :mod:`recovery.splits`), and every piece stops at the next piece's
    first record, so consecutive pieces meet where the sequential walk passes."""
    store, base, lo, hi = t.store, t.base, t.lo, t.hi
    profile = t.profile
    hints = t.hints
    if isinstance(hints, Inherited):  # the parent's hints, inherited through fork
        every = inherited(hints)
        i0, i1 = np.searchsorted(every, [t.a, t.b])
        hints = every[i0:i1] if i1 > i0 else None

    def first(nominal: int) -> int:
        if nominal <= lo:
            return lo
        if nominal >= hi:
            return hi
        f = store.commitlog_file_for(base)
        assert f is not None  # (the planned pieces lie in the store's files)
        with store.map(f) as mf:
            q = engine.resync(mf.buf, nominal - base, min(mf.size, hi - base), base, profile, False)
        return hi if q is None else base + q

    start, stop = first(t.a), first(t.b)
    problems: list[ReputProblem] = []
    stats = ReputStats()
    runs: list[DispatchColumns] = []
    if start < stop:
        runs = list(
            iter_dispatch(
                store,
                profile,
                from_offset=start,
                to_offset=stop,
                max_delay_level=t.mdl,
                problems=problems,
                stats=stats,
                tags=t.tags,
                index_keys=t.index_keys,
                hints=hints,
            )
        )
    result: _PieceResult = place(t.slot, _PieceResult(start, stop, runs, problems, stats))
    return result


def laid_end_to_end(runs: list[DispatchColumns], a: int, b: int) -> bool:
    """Whether the runs hold records laid end to end from exactly ``a`` to exactly ``b``."""
    pos = a
    for c in runs:
        if c.count == 0:
            continue
        p = c.position
        if int(p[0]) != pos:
            return False
        ends = p + c.msg_size
        if len(p) > 1 and not np.array_equal(ends[:-1], p[1:]):
            return False
        pos = int(ends[-1])
    return pos == b


def iter_dispatch_parallel(
    store: Store,
    profile: BrokerProfile,
    *,
    jobs: int | None = None,
    piece_size: int | None = None,
    min_bytes: int | None = None,
    **walk: Unpack[WalkArgs],
) -> Iterator[DispatchColumns]:
    """:func:`iter_dispatch`'s requests, the same ones in the same order, decoded by
    ``jobs`` worker processes (default: one per CPU) in pieces of about ``piece_size``
    bytes (default :data:`PIECE_SIZE`); ``stats.pieces`` counts the pieces taken from them.

    Pieces are cut inside files at record starts (the resync rule: an intact record whose
    PHYSICALOFFSET is its own offset) and are handed on in commitlog order. A piece is
    taken only if the walk could not have gone differently: no problem in it and, unless
    it ends its file's range, records laid end to end from its first record to the next
    piece's. At the first piece that fails this (damage, or a record image embedded in a
    body fooling the resync) the rest of the range is walked here, in order, by
    :func:`iter_dispatch` itself, which also records the problems. Stores whose files are
    not all of the mapped size, or ranges under ``min_bytes`` (default
    :data:`PARALLEL_MIN_BYTES`), are walked in order too."""
    seq = walk.copy()
    stats, problems = walk.get("stats"), walk.get("problems")
    stats = seq["stats"] = stats if stats is not None else ReputStats()
    seq["problems"] = problems if problems is not None else []
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    piece_size = PIECE_SIZE if piece_size is None else piece_size
    files = [f for f in store.commitlog if f.size > 0]
    span = (
        _parallel_span(
            store,
            files,
            walk.get("from_offset"),
            walk.get("to_offset"),
            PARALLEL_MIN_BYTES if min_bytes is None else min_bytes,
        )
        if jobs > 1 and files
        else None
    )
    if span is None:
        return (yield from iter_dispatch(store, profile, **seq))
    lo, END = span
    ctx = fork_context()
    hints = walk.get("hints")
    # with fork the pieces take their share of the hints from the parent's copy, not as
    # arrays pickled through the pool's pipe
    with engine.inheriting("reput.hints", hints, ctx is not None) as token:
        tasks = _plan_pieces(
            store,
            profile,
            files,
            lo,
            END,
            piece_size,
            hints,
            token,
            (walk.get("max_delay_level"), walk.get("tags", True), walk.get("index_keys", True)),
        )
        if len(tasks) < 2:
            return (yield from iter_dispatch(store, profile, **seq))
        stats.from_offset = lo
        stats.end_offset = lo
        yield from _run_pieces(store, profile, tasks, min(jobs, len(tasks)), 2 * jobs, piece_size, ctx, seq)


def _parallel_span(
    store: Store, files: list[StoreFile], from_offset: int | None, to_offset: int | None, min_bytes: int
) -> tuple[int, int] | None:
    """The range ``(lo, END)`` the parallel pass cuts into pieces, or None when it walks in
    order: files not all of the mapped size or not contiguous, or a range under
    ``min_bytes``."""
    F = store.geometry.commitlog_file_size
    lo = files[0].base if from_offset is None else max(from_offset, files[0].base)
    END = files[-1].base + F if to_offset is None else min(to_offset, files[-1].base + F)
    regular = all(f.size == F for f in files) and all(
        files[k + 1].base == files[k].base + F for k in range(len(files) - 1)
    )
    if not regular or END - lo < min_bytes or lo < files[0].base:
        return None
    return lo, END


def _run_pieces(
    store: Store,
    profile: BrokerProfile,
    tasks: list[_Piece],
    workers: int,
    window: int,
    piece_size: int,
    ctx: Any,
    seq: WalkArgs,
) -> Iterator[DispatchColumns]:
    """Run the piece tasks in ``workers`` processes started by ``ctx`` and merge them
    (:func:`_merge_pieces`). The workers hand their columns back through shared memory
    (:mod:`recovery.transfer`) where ``ctx`` forks: one slot per task in flight (2 per
    worker, the one submitted before a result is taken) and one for the run the consumer
    still holds."""
    arena: Arena | None = None
    if ctx is not None:
        try:
            # (through the module: a test puts a small or a failing one there)
            arena = transfer.Arena(2 * workers + 2, max(piece_size, 1 << 20))
        except (OSError, ValueError, OverflowError):  # no room for the mapping: through the pipe
            arena = None

    def with_slot(t: _Piece) -> _Piece:
        return t._replace(slot=arena.acquire() if arena is not None else None)

    install(arena)
    try:
        with engine.Stream(
            _piece_task, tasks, workers, window=window, make_pool=lambda n: engine.pool(n, ctx), arg=with_slot
        ) as st:
            yield from _merge_pieces(st, arena, store, profile, seq)
    finally:
        install(None)
        if arena is not None:
            arena.close()


def _plan_pieces(
    store: Store,
    profile: BrokerProfile,
    files: list[StoreFile],
    lo: int,
    END: int,
    piece_size: int,
    hints: np.ndarray | None,
    token: Inherited | None,
    walk: tuple[int | None, bool, bool],
) -> list[_Piece]:
    """The piece tasks of ``[lo, END)``: each file's range cut into pieces of
    ``piece_size`` (:func:`recovery.parallel.cut`) up to the end of its data, the last
    piece taking the rest of the range. ``walk``: (max delay level, tags, index keys)."""
    F = store.geometry.commitlog_file_size
    mdl, tags, index_keys = walk
    tasks: list[_Piece] = []
    for f in files:
        a, b = max(lo, f.base), min(END, f.base + F)
        if a >= b:
            continue
        # no piece starts in the file's zero tail (a last file's unused space): the piece
        # before it walks to the end of the data, as the sequential pass does
        pieces = engine.cut(a, max(data_end(store, f, a, b), a + 1), piece_size)
        cuts = [start for start, _stop in pieces] + [b]
        for k in range(len(cuts) - 1):
            last = k == len(cuts) - 2
            ph: np.ndarray | Inherited | None = (
                token  # the hints of the piece's nominal range (past it the walk goes on without)
            )
            if hints is not None and token is None:
                i0, i1 = np.searchsorted(hints, [cuts[k], cuts[k + 1]])
                ph = hints[i0:i1] if i1 > i0 else None
            tasks.append(
                _Piece(
                    store,
                    profile,
                    str(f.path),
                    f.base,
                    a,
                    cuts[k],
                    cuts[k + 1],
                    b,
                    mdl,
                    tags,
                    index_keys,
                    ph,
                    None,
                    last,
                )
            )
    return tasks


def _merge_pieces(
    st: engine.Stream[_Piece], arena: Arena | None, store: Store, profile: BrokerProfile, seq: WalkArgs
) -> Iterator[DispatchColumns]:
    """The merge: the pieces' runs in commitlog order while each piece is one the
    sequential walk would have made; from the first that is not, the sequential pass
    itself (``seq``: :func:`iter_dispatch`'s arguments, its ``stats`` filled in)."""
    stats = seq["stats"]
    assert stats is not None
    files_seen: set[int] = set()
    progress = seq.get("progress")
    for t, sent, r in st:
        if arena is not None:
            r = arena.take(r, sent.slot)
        # a piece that reaches its file's range end (no later piece of the file has a
        # record) may end in a BLANK or the data's end, like the sequential walk
        ok = not r.problems and (t.last or r.stop >= t.hi or laid_end_to_end(r.runs, r.start, r.stop))
        if not ok:
            # walk the rest here, in order: exactly the sequential pass from this point
            st.cancel()
            seq["from_offset"] = r.start
            sub = seq["stats"] = ReputStats()
            yield from iter_dispatch(store, profile, **seq)
            _add_stats(stats, sub)
            stats.files = len(files_seen - {t.base}) + sub.files
            stats.end_offset = sub.end_offset
            return
        files_seen.add(t.base)
        stats.pieces += 1
        _add_stats(stats, r.stats)
        if r.start < r.stop:
            stats.end_offset = r.stats.end_offset
        runs = r.runs
        del r  # (a piece's arrays are views of its arena slot: drop them as soon as used)
        while runs:
            yield runs.pop(0)
        if progress:
            progress(t.b - t.a)
    stats.files = len(files_seen)


def data_end(store: Store, f: StoreFile, a: int, b: int, block: int = 1 << 20) -> int:
    """End of the last ``block`` (counted back from ``b``) of ``[a, b)`` (physical offsets
    in file ``f``) holding a non-zero byte; ``a`` when all of it is zeros. Holes are
    skipped and zeros searched on words (:func:`recovery.scan.last_nonzero_in_file`)."""
    lo, hi = a - f.base, min(b - f.base, f.size)
    p = last_nonzero_in_file(f.path, lo, hi) if hi > lo else -1
    if p < 0:
        return a
    return f.base + hi - ((hi - 1 - p) // block) * block


def _add_stats(into: ReputStats, s: ReputStats) -> None:
    for name in ("records", "blanks", "commitlog_bytes"):
        setattr(into, name, getattr(into, name) + getattr(s, name))
