"""Results of worker processes handed to the parent through shared memory.

A process pool returns a task's result by pickling it into a pipe: the worker copies every
array into the pickle, the pipe moves it 64 KiB at a time, and the parent reads the chunks
into a buffer and copies them out again. For the reput pass (several hundred MB of columns
for a 1 GiB commitlog) that cost about a CPU-second, more than the decoding of a whole
commitlog file.

An :class:`Arena` is anonymous shared memory (``mmap(-1, ...)``: MAP_SHARED) made before
the pool's processes fork, cut into fixed slots. A worker pickles its result with protocol
5, keeping the large buffers (numpy arrays) out of band, copies those buffers into the slot
the parent gave its task, and returns only the small pickle and the buffers' places
(:class:`Parcel`). The parent rebuilds the result on the slot itself: its numpy arrays
are views of the slot, not copies, and the slot is handed to a new task only once the last
of them is gone. A result that does not fit its slot, a task submitted while every slot is
in use, or a worker that has no arena (a start method other than fork) returns the object
itself, the plain way.

Nothing outlives the processes: the memory is anonymous, not a file.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import mmap
import os
import pickle
import signal
import sys
import weakref
from typing import Any, NamedTuple

import numpy as np

_ALIGN = 64


class Parcel(NamedTuple):
    """A result placed in slot ``slot`` of the arena: ``meta`` is the pickle without its
    out-of-band buffers, ``spans`` their (offset, length) inside the slot."""

    slot: int
    meta: bytes
    spans: tuple[tuple[int, int], ...]
    used: int


class Arena:
    """``slots`` slots of ``slot_size`` bytes of shared memory (untouched pages cost
    nothing). Create it in the parent before the workers fork; :func:`install` it as the
    workers' arena; hand each task a free slot and :meth:`take` its parcel."""

    def __init__(self, slots: int, slot_size: int) -> None:
        self.slot_size = max(_ALIGN, slot_size - slot_size % _ALIGN)
        self.slots = slots
        self.mm = mmap.mmap(-1, self.slots * self.slot_size)
        self.free = list(range(slots))

    def acquire(self) -> int | None:
        """A free slot, or None when every slot holds a result not yet taken."""
        return self.free.pop(0) if self.free else None

    def release(self, slot: int) -> None:
        if slot not in self.free:
            self.free.append(slot)

    def put(self, slot: int, obj: Any) -> Any:
        """(worker side) ``obj`` placed in ``slot``: a :class:`Parcel`, or ``obj`` itself
        when its buffers do not fit."""
        bufs: list[pickle.PickleBuffer] = []
        meta = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        raws = [b.raw() for b in bufs]
        spans: list[tuple[int, int]] = []
        pos = 0
        for r in raws:
            spans.append((pos, r.nbytes))
            pos += r.nbytes + (-r.nbytes) % _ALIGN
        if pos > self.slot_size or not (0 <= slot < self.slots):
            return obj
        base = slot * self.slot_size
        mv = memoryview(self.mm)
        try:
            for (o, n), r in zip(spans, raws):
                mv[base + o : base + o + n] = r
        finally:
            mv.release()
        return Parcel(slot, meta, tuple(spans), pos)

    def take(self, parcel: Any, slot: int | None = None) -> Any:
        """(parent side) The object of a parcel, or the object itself if the worker could
        not place it (``slot``, the slot its task was given, is then free again at once).
        A parcel's arrays are views of its slot, not copies: the slot becomes free again
        only when the last of them is gone (the views keep one uint8 array of the slot
        alive, and its finalizer frees the slot), so a worker never writes over memory the
        parent still reads; until then a task gets another slot, or none (and returns its
        result through the pipe)."""
        if not isinstance(parcel, Parcel):
            if slot is not None:
                self.release(slot)
            return parcel
        slot = parcel.slot
        whole = np.frombuffer(self.mm, dtype=np.uint8, count=parcel.used, offset=slot * self.slot_size)
        weakref.finalize(whole, self.release, slot)
        return pickle.loads(parcel.meta, buffers=[whole[o : o + n] for o, n in parcel.spans])

    def close(self) -> None:
        """Unmap now if nothing the parent took still uses the memory; otherwise it is
        unmapped when the last such array is gone."""
        with contextlib.suppress(BufferError):
            self.mm.close()


_WORKER_ARENA: Arena | None = None


def install(arena: Arena | None) -> None:
    """Make ``arena`` the one :func:`place` uses (set in the parent just before the workers
    fork, so they inherit it; None to clear)."""
    global _WORKER_ARENA
    _WORKER_ARENA = arena


def place(slot: int | None, obj: Any) -> Any:
    """(worker side) ``obj`` in the inherited arena's ``slot`` if there is one, else ``obj``."""
    arena = _WORKER_ARENA
    if arena is None or slot is None:
        return obj
    return arena.put(slot, obj)


# Values the workers inherit through fork: the parent shares a value under a name before
# the pool forks and puts the token in the tasks instead of the value (a large array then
# never goes through the pool's pipe); a worker looks the token up.


class Inherited(NamedTuple):
    """The token of a value shared with :func:`share` (it travels in a task)."""

    name: str


_SHARED: dict[str, Any] = {}


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """(worker side, as the pool's initializer) Have the kernel kill this worker when the
    process that made it dies (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``): a ``kill -9`` of
    the main rmqtool process must not leave workers holding the store's files open. A
    parent that died before the call is caught by the getppid check. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def worker_init() -> None:
    """The initializer of rmqtool's worker pools: die with the parent."""
    die_with_parent(_PARENT_PID[0] or None)


_PARENT_PID = [0]


def pool(workers: int, ctx: Any = None, initializer: Any = None) -> Any:
    """A ProcessPoolExecutor whose workers die with this process (:func:`worker_init`,
    then ``initializer``)."""
    _PARENT_PID[0] = os.getpid()
    init = worker_init if initializer is None else _chain(initializer)
    return cf.ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx if ctx is not None else fork_context(), initializer=init
    )


class _chain:
    def __init__(self, then: Any) -> None:
        self.then = then

    def __call__(self) -> None:
        worker_init()
        self.then()


def fork_context() -> Any | None:
    """multiprocessing's fork context where the platform has one, else None."""
    # lazy: multiprocessing (and socket, selectors) cost every command ~4 ms of start-up,
    # and a pool is made only for large stores
    import multiprocessing as mp

    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None


def share(name: str, value: Any) -> Inherited:
    """(parent side, before the workers fork) Share ``value``; returns its token."""
    _SHARED[name] = value
    return Inherited(name)


def unshare(token: Inherited) -> None:
    """(parent side, once the workers are done) Forget a shared value."""
    _SHARED.pop(token.name, None)


def inherited(token: Inherited) -> Any:
    """(worker side) The value a token stands for, as the parent had it at the fork."""
    return _SHARED[token.name]


def is_shared(token: Inherited) -> bool:
    return token.name in _SHARED
