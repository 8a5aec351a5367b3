"""The one record walker of the commitlog: the loop "run of entries -> first unsure record
-> the framing's check (``check_record``) -> the policy decides -> go on, stop, skip or
resync", written once for every framing and every command (issue 32).

Three parties:

* the **framing** (:class:`recovery.framing.Framing`; the classic one,
  :data:`recovery.framing.CLASSIC`, is RocketMQ's commitlog) says how entries are found
  and chained, where each entry's record lies, how one entry is checked, the padding at a
  file's end, and what resync looks for. It holds no loop.
* the **policy** (a :class:`Policy` of each command) says what the walk is for: how long
  its runs are (:attr:`Policy.cap`, :attr:`Policy.need`, :attr:`Policy.magics`, passes of
  :attr:`Policy.pass_records` / :attr:`Policy.pass_bytes`), which records of a run it is
  sure of and what it does with them (:meth:`Policy.take`, vectorised, and
  :meth:`Policy.end`), what one record checked by the framing means (:meth:`Policy.decide`
  returns :data:`GO`, :data:`STOP`, :data:`SKIP`, :data:`READ` or a resync
  :class:`Act`), and what it hands on (items appended to :attr:`Policy.out`, which the walk
  yields). verify records findings and salvage; recover stops at the first bad record;
  reput emits dispatch columns; dump and export yield rows.
* the **walker** (:func:`walk`) moves the cursor: it is the only loop of the core that
  advances a position by a value read from the buffer (tests/test_one_walker.py holds
  every other module to that). It also owns the chain of the consume queues' hints
  (:func:`chain`) and resync's search (:func:`resync`).

The walk of a region ``[pos, stop)`` of one file (:class:`Source`): while ``pos <
stop``, a run of chained entries from ``pos`` (:func:`chain`: at most ``cap``, each with
its first ``need`` bytes before the file's readable end, the records' magic one of
``magics``); the framing cuts the run at the first entry it is not sure of. The policy
takes the run in passes; at the first record of a pass it is unsure of, that record goes
to the framing's check and the policy decides: :data:`GO` takes it and the run goes on
after it (an unsure record the check accepts costs no new run), anything else ends the
run there. A run that ran to its end goes on with a new run (when the chain was capped) or
with the record where the chain broke, checked alone. With :attr:`Policy.wait` > 0 the
next records go one by one (:meth:`Policy.inline` first, a one-record test that needs no
check, then the check). The walk ends where the policy says :data:`STOP`, where a resync
finds nothing, or once ``pos >= stop`` and :meth:`Policy.arrived`; :func:`walk` returns a
:class:`Walked`.

An inner-batch framing (a BatchConsumeQueue's inner batch: one commitlog record holding
several messages) plugs in below the policies: its :meth:`~Policy.take` of a run yields
one item per inner message (``out`` takes any number of items per record) and its check
returns the record's :class:`~recovery.check.Checked` as now; the walk still moves by
entries, so no loop is added. A DLedger framing overrides the framing's header, chase,
check, padding and resync rule (its entries' magic and index order).

The standard policies are in :mod:`recovery.walks`: the broker's per-file recovery walk
(fast or record by record) and the forensic walk of dump and export that resyncs past
damage.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

import numpy as np

from . import ccore
from . import check as ck
from .byteviews import ByteViews, byte_views
from .framing import CLASSIC, Framing
from .scan import first_nonzero_block
from .store import Store
from .versions import BrokerProfile

__all__ = [
    "GO",
    "READ",
    "SKIP",
    "STOP",
    "Act",
    "Follow",
    "Policy",
    "Run",
    "Source",
    "Walked",
    "chain",
    "chained",
    "finish",
    "follow",
    "resync",
    "resync_from",
    "store_framing",
    "walk",
]

T = TypeVar("T")

CHASE_BATCH = 1 << 16  # entries per run followed one by one (the compiled core's chase)
HINT_BATCH = CHASE_BATCH * 16  # entries per run where the consume queues' hints chain them
UNLIMITED = 1 << 62

# what the walk does after a record checked one by one (Policy.decide)
GO_, STOP_, SKIP_, READ_, RESYNC_ = range(5)


class Act(NamedTuple):
    """A policy's decision on one checked record: :data:`GO` (take it: the walk moves past
    it, by the entry's length, or by ``at`` when >= 0), :data:`STOP` (the walk ends at it), :data:`SKIP` (move past
    a readable record by its TOTALSIZE), :data:`READ` (move by the bytes its check read:
    quirk Q13), or ``Act(RESYNC_, start)`` (search the next intact entry from ``start``,
    -1: the record's position + 1; :meth:`Policy.resynced` decides on what is found)."""

    kind: int
    at: int = -1


GO = Act(GO_)
STOP = Act(STOP_)
SKIP = Act(SKIP_)
READ = Act(READ_)


def resync_from(start: int = -1) -> Act:
    """``Act(RESYNC_, start)``."""
    return Act(RESYNC_, start)


class Walked(NamedTuple):
    """Where a walk ended: ``pos``, and the outcome of the record there when the policy
    stopped (or a resync found nothing after it); None when it arrived at its stop."""

    pos: int
    checked: ck.Checked | None


class Source:
    """One mapped commitlog file as the walker reads it: the buffer, its readable end, the
    file's offset, the profile its records are checked with and its framing."""

    __slots__ = ("buf", "end", "base", "profile", "framing", "_views")

    def __init__(
        self,
        buf: Any,
        end: int,
        base: int,
        profile: BrokerProfile,
        framing: Framing | None = None,
        views: ByteViews | None = None,
    ) -> None:
        self.buf, self.end, self.base, self.profile = buf, end, base, profile
        self.framing = CLASSIC if framing is None else framing
        self._views = views

    @property
    def views(self) -> ByteViews:
        """The buffer's byte views (made on first use)."""
        if self._views is None:
            self._views = byte_views(self.buf)
        return self._views

    def release(self) -> None:
        self._views = None


class Run:
    """A run of chained entries: their starts ``S`` (int64 file positions), the position
    after the last one ``p``, why the chain stopped (a :mod:`recovery.ccore` reason), each
    entry's length ``E``; the records' starts ``P`` and TOTALSIZEs ``T`` (the framing's)."""

    __slots__ = ("S", "p", "why", "E", "P", "T", "C", "n")

    def __init__(self, S: np.ndarray, p: int, why: int, E: np.ndarray, P: np.ndarray, T: np.ndarray) -> None:
        self.S, self.p, self.why, self.E, self.P, self.T = S, p, why, E, P, T
        self.n = len(S)
        self.C: np.ndarray | None = None

    @property
    def chain(self) -> np.ndarray:
        """The starts and, last, the position after the run (n + 1 values)."""
        if self.C is None:
            self.C = np.append(self.S, self.p)
        return self.C

    def pass_end(self, i: int, records: int, nbytes: int) -> int:
        """The end of the pass from entry ``i``: at most ``records`` entries and about
        ``nbytes`` bytes (at least one entry)."""
        k = min(i + records, self.n)
        if nbytes < UNLIMITED:
            C = self.chain
            if C[k] - C[i] > nbytes:
                k = max(i + 1, int(np.searchsorted(C, C[i] + nbytes, side="right")) - 1)
        return k


class Policy:
    """What one walk is for (see the module docstring). The defaults: runs of
    :data:`CHASE_BATCH` entries with no magic required, every record of a run sure, the
    record where a chain breaks checked and taken while it is a message."""

    batched = True  # runs at all (False: every record one by one: the reference walks)
    cap = CHASE_BATCH  # entries per run followed one by one
    hint_cap = HINT_BATCH  # entries per run where hints chain them
    need = 8  # bytes of a record that must lie before the readable end for a run to take it
    magics: tuple[int, ...] | None = None  # record magics a run requires (None: any)
    min_total = 0  # a run takes records longer than this
    run_bytes = UNLIMITED  # a run takes entries starting within about this many bytes of its start
    uniform = 0  # > 0: runs of at least that many entries of one length taken at once
    pass_records = UNLIMITED  # records per pass of take
    pass_bytes = UNLIMITED  # and about this many bytes
    hints: np.ndarray | None = None  # sorted file positions where entries likely start
    wait = 0  # records to go one by one before the next run
    check_opts: dict[str, Any] = {}  # check_record's keywords (a policy sets its own)

    def __init__(self) -> None:
        self.out: list[Any] = []  # items the walk yields (then clears)

    def runs(self, pos: int) -> bool:
        """Whether the walk takes a run from ``pos`` (else the record there goes one by
        one). Default: :attr:`batched` and no :attr:`wait` left."""
        return self.batched and self.wait <= 0

    def begin(self, src: Source, run: Run) -> None:
        """A run starts (the policy may decode it whole)."""

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        """The records ``[i, j)`` of the pass ``[i, k)`` of ``run`` the policy is sure of (it
        takes them): ``(j, unsure)``; ``unsure``: record ``j`` goes to the framing's check
        (else the run ends at ``j`` and the walk goes on from there). Default: all."""
        return k, True

    def end(self, src: Source, run: Run, k: int) -> None:
        """The run ends: its first ``k`` entries taken (every run ends, an empty one too)."""

    def inline(self, src: Source, pos: int) -> int:
        """A record taken one by one without the check: its entry's length (0: not)."""
        return 0

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        """The record at ``pos`` (entry ``j`` of the current run, -1: alone) as the framing
        checked it: GO while it is a message, else STOP."""
        return GO if c.is_message else STOP

    def resync(self, src: Source, start: int) -> int | None:
        """The next intact entry from ``start`` (:func:`resync`, without the CRC)."""
        return resync(src.buf, start, src.end, src.base, src.profile, False, framing=src.framing)

    def resynced(self, src: Source, pos: int, c: ck.Checked, q: int | None) -> int | None:
        """After the record at ``pos`` (outcome ``c``) a resync found ``q``: where the walk
        goes on (None: it ends)."""
        return q

    def arrived(self, pos: int) -> bool:
        """The walk reached its stop at ``pos``: whether it ends (False: the record at
        ``pos`` is checked all the same; reput after quirk Q13)."""
        return True

    def broke(self, src: Source, pos: int) -> bool:
        """A run's chain broke at ``pos`` (before the stop, not capped): whether the record
        there is checked (False: the walk ends there, with no outcome)."""
        return True


class Follow(Policy):
    """Entries followed by their lengths alone (nothing checked): the walk ends where the
    chain breaks or at its stop (:func:`follow`)."""

    need = 0

    def broke(self, src: Source, pos: int) -> bool:
        return False


def follow(buf: Any, start: int, stop: int, end: int, profile: BrokerProfile, framing: Framing | None = None) -> int:
    """Where following the entries' lengths from ``start`` (a length > 0 that fits before
    ``end``) arrives: the first entry start >= ``stop``, or where the chain breaks."""
    src = Source(buf, end, 0, profile, framing)
    try:
        return finish(walk(src, Follow(), start, stop)).pos
    finally:
        src.release()


def finish(g: Generator[Any, None, Walked]) -> Walked:
    """Run a walk whose policy yields nothing to its end; its :class:`Walked`."""
    while True:
        try:
            next(g)
        except StopIteration as e:
            out: Walked = e.value
            return out


def walk(src: Source, pol: Policy, pos: int, stop: int) -> Generator[Any, None, Walked]:
    """Walk ``[pos, stop)`` of ``src`` with policy ``pol``, yielding what it hands on; the
    module docstring tells the loop."""
    fr = src.framing
    out = pol.out
    buf, end, profile, opts = src.buf, src.end, src.profile, pol.check_opts
    # (bound once: the one-by-one path is per record; the classic framing's check is
    # check_record itself, looked up now so that a test's patch of it is seen)
    check = ck.check_record if type(fr).check is _CLASSIC_CHECK else fr.check
    decide, runs = pol.decide, pol.runs
    inline = pol.inline if type(pol).inline is not Policy.inline else None
    c: ck.Checked | None = None
    while True:
        act: Act | None = None
        if pos >= stop:
            if pol.arrived(pos):
                return Walked(pos, None)
        elif runs(pos):
            run = chain(src, pos, stop, pol)
            i, act, checked = yield from _take(src, pol, run)
            if i < run.n:  # an unsure record the policy does not take, or the policy ends the run
                pos = int(run.S[i])
                if act is None:
                    continue  # (a new run, or one by one)
                c = checked
            else:
                pos = run.p
                if pos >= stop or run.why == ccore.CAPPED:
                    continue
                if not pol.broke(src, pos):
                    return Walked(pos, None)
        if act is None:  # the record at pos, one by one
            pol.wait -= 1
            if inline is not None:
                size = inline(src, pos)
                if size:
                    if out:
                        yield from out
                        out.clear()
                    pos += size
                    continue
            c = check(buf, pos, end, profile, **opts)
            act = decide(src, pos, c, -1)
            if out:
                if len(out) == 1:
                    yield out.pop()
                else:
                    yield from out
                    out.clear()
        assert c is not None
        kind = act.kind
        if kind == GO_:
            pos += c.size if act.at < 0 else act.at
        elif kind == STOP_ or (kind != RESYNC_ and c.rec is None):
            return Walked(pos, c)
        elif kind == SKIP_ and c.rec is not None:
            pos += fr.header + c.rec.total_size
        elif kind == READ_ and c.rec is not None:
            pos += fr.header + c.rec.computed_size
        else:
            nxt = pol.resync(src, pos + 1 if act.at < 0 else act.at)
            found = pol.resynced(src, pos, c, nxt)
            if out:
                yield from out
                out.clear()
            if found is None:
                return Walked(pos, c)
            pos = found


def _take(src: Source, pol: Policy, run: Run) -> Generator[Any, None, tuple[int, Act | None, ck.Checked | None]]:
    """A run taken by the policy, pass by pass; every record it is unsure of checked by
    the framing and decided on. Returns (how many leading entries it took, the decision
    that ended it and the outcome decided on; None: it ended with no decision)."""
    fr, out, S, n = src.framing, pol.out, run.S, run.n
    i = k = 0
    act: Act | None = None
    c: ck.Checked | None = None
    if n:
        pol.begin(src, run)
    while i < n:
        if i >= k:  # a new pass
            k = run.pass_end(i, pol.pass_records, pol.pass_bytes)
        j, unsure = pol.take(src, run, i, k)
        if out:
            yield from out
            out.clear()
        if j >= k:
            i = k
            continue
        i = j
        if not unsure:
            break
        q = int(S[j])
        if not pol.inline(src, q):
            c = fr.check(src.buf, q, src.end, src.profile, **pol.check_opts)
            act = pol.decide(src, q, c, j)
            if out:
                yield from out
                out.clear()
            if act.kind != GO_:
                break
            act = None
        i = j + 1  # taken: the run goes on after it
    pol.end(src, run, i)
    if out:
        yield from out
        out.clear()
    return i, act, c


_CLASSIC_CHECK = Framing.check


# ---------------------------------------------------------------------------------------
# Chains


def chain(src: Source, pos: int, stop: int, pol: Policy) -> Run:
    """The run of entries from ``pos`` for ``pol``: chained by the framing (or by the
    policy's hints where they lie, :func:`_hinted`), each starting before ``stop`` with the
    first ``pol.need`` bytes of its record before the readable end, each record longer than
    ``pol.min_total``, cut where a record's magic is not one of ``pol.magics`` and at the
    first entry the framing is not sure of."""
    fr = src.framing
    end = src.end
    need = pol.need + fr.header if pol.need > 0 else 0  # (bytes of the entry)
    lim = min(stop, end - need + 1) if need > 0 else stop
    if pol.run_bytes < UNLIMITED:
        lim = min(lim, pos + pol.run_bytes - need + 1)
    hints = pol.hints
    if hints is not None and len(hints):
        if fr.header:  # (the hints are where records start; entries start before them)
            hints = hints - fr.header
        S, p, capped = _hinted(src, pos, lim, hints, pol.hint_cap)
        why = ccore.CAPPED if capped else ccore.LIMIT
        if pol.magics is not None and len(S):
            m = fr.magics(src.views, S)
            bad = m != pol.magics[0]
            if len(pol.magics) > 1:
                bad &= m != pol.magics[-1]
            if bad.any():  # the run stops at a record with another magic
                k = int(np.argmax(bad))
                p, S, why = int(S[k]), S[:k], ccore.MAGIC
    else:
        min_total = pol.min_total + fr.header if pol.min_total > 0 else 0
        S, p, why = fr.chase(src.buf, pos, lim, end, pol.cap, min_total, pol.magics, pol.uniform)
    S = np.asarray(S, dtype=np.int64)
    n = len(S)
    E = np.empty(n, dtype=np.int64)
    if n:
        E[:-1] = S[1:] - S[:-1]
        E[-1] = p - S[-1]
    P, T, sure = fr.records(src.views, S, E)
    if sure < n:  # the framing checks that entry on its own: the run ends before it
        p, why = int(S[sure]), ccore.SIZE
        S, E, P, T = S[:sure], E[:sure], P[:sure], T[:sure]
    return Run(S, p, why, E, P, T)


def _hinted(src: Source, pos: int, lim: int, hints: np.ndarray, cap: int) -> tuple[np.ndarray, int, bool]:
    """Entry starts from ``pos`` as the framing's chase finds them, at most ``cap``: where
    the position is a hint (``hints``: sorted positions, e.g. the consume queues'
    offsets), the run of hints chained by their own lengths is taken at once (vectorised),
    exactly what following them one by one gives. Returns (starts, next position,
    capped)."""
    fr = src.framing
    end = src.end
    v = src.views
    out: list[np.ndarray] = []
    taken = 0
    while pos < lim and taken < cap:
        i = int(np.searchsorted(hints, pos))
        if i < len(hints) and hints[i] == pos:
            h = hints[i : i + min(CHASE_BATCH * 4, cap - taken)]
            tot = fr.lengths(v, h)
            nxt = h + tot
            ok = (tot > 0) & (nxt <= end) & (h < lim)
            cont = ok.copy()
            cont[:-1] &= nxt[:-1] == h[1:]
            brk = np.flatnonzero(~cont)
            j = int(brk[0]) if len(brk) else len(h) - 1  # h[:j] chained and taken
            if ok[j]:
                out.append(h[: j + 1])
                taken += j + 1
                pos = int(nxt[j])
                continue
            out.append(h[:j])
            taken += j
            pos = int(h[j])
            break  # h[j] is >= lim or its length stops the walk
        # not a hint: one entry at a time up to the next hint
        s, pos, why = fr.chase(
            src.buf, pos, min(lim, int(hints[i])) if i < len(hints) else lim, end, cap - taken, 0, None
        )
        out.append(s)
        taken += len(s)
        if why != ccore.LIMIT:
            break
    starts = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return starts, pos, pos < lim and taken >= cap


# ---------------------------------------------------------------------------------------
# Slices walked apart, chained


def chained(first: int, pieces: dict[int, T], arrival: Callable[[T], int | None], rest: Callable[[int], T]) -> list[T]:
    """The pieces of a walk cut in slices (walked apart, by worker processes), in the
    order of the sequential walk: from ``first``, the piece that starts where the walk
    arrived (``pieces``: by start), or where none does ``rest(position)``, the walk from
    there in order. ``arrival(piece)``: where the walk goes on after it (None: it ended in
    it). A piece is used only where the sequential walk arrives at its start, so the result
    is the sequential walk's whatever the slicing (:mod:`recovery.parallel`)."""
    out: list[T] = []
    pos: int | None = first
    while pos is not None:
        r = pieces.get(pos)
        if r is None:
            r = rest(pos)
        out.append(r)
        pos = arrival(r)
    return out


# ---------------------------------------------------------------------------------------
# Resync


def resync(
    buf: Any,
    start: int,
    end: int,
    file_base: int,
    profile: BrokerProfile,
    check_crc: bool = True,
    limit: int | None = None,
    *,
    framing: Framing | None = None,
) -> int | None:
    """The first position in ``[start, limit)`` (``limit`` defaults to ``end``, the readable
    bytes) where an intact entry starts: the framing's candidate (classic: a V1, or where
    the profile reads it V2, magic at +4 whose 4 bytes end before ``min(limit + 4, end)``)
    whose record validates (its body CRC too when ``check_crc``) and holds its own offset
    (the framing's stored-offset rule). Entries are not aligned, so every byte is a
    candidate; the magic is searched with ``find`` after whole zero blocks are skipped (no
    magic starts in one; an entry starting up to 8 bytes before the first non-zero block
    stays in view). None when there is none."""
    fr = CLASSIC if framing is None else framing
    limit = end if limit is None else limit
    bound = min(limit + fr.magic_at, end)  # the magic's last byte lies before this
    nz = first_nonzero_block(buf, start, bound)
    if nz is None:
        return None
    pos = max(start, nz - 8)
    while pos < limit:
        cand = fr.candidate(buf, pos, bound, profile)
        if cand == -1 or cand >= limit:
            return None
        if cand >= start and fr.intact(buf, cand, end, file_base, profile, check_crc):
            return cand
        pos = cand + 1
    return None


def store_framing(store: Store, f: Any = None) -> Framing:
    """The framing of a store's commitlog (:attr:`recovery.store.Store.framing`; the
    classic one unless the store declares another), of its file ``f`` when given: a mixed
    store's classic files, before the framing's ``begins_at`` (DLedger's divided offset),
    are classic."""
    fr = getattr(store, "framing", None)
    if not isinstance(fr, Framing):
        return CLASSIC
    if f is not None and f.base < getattr(fr, "begins_at", 0):
        return CLASSIC
    return fr
