"""The one parallel engine: plan slices of the commitlog, resynchronise at a slice's
start, run a caller's per-slice function in worker processes, and merge the per-slice
results into exactly the sequential result.

Every command that walks the commitlog on several cores (verify's parts, recover's walk
slices, reput's pieces, the Spark splits) goes through the same four steps:

* :func:`cut` plans the slices of one byte range (one rule: slices of ``size`` bytes from
  the range's start, the last one taking the rest, optionally folding a short rest into
  the slice before it);
* :func:`resync` finds where a slice that does not start at a file's start enters the
  record chain (the first intact record whose PHYSICALOFFSET is its own offset);
* :func:`run` (all results, in task order) and :func:`stream` (results handed on in task
  order while later tasks still run) call the caller's per-slice function in a pool made
  by :func:`pool`: one start-method rule (:func:`context`), one initializer (workers die
  with this process and ignore SIGINT: the parent decides), and on any failure or Ctrl-C
  the workers are stopped at once and the caller gets the error;
* the caller's merge chains the results (a slice is used only where the sequential walk
  arrives at its start; elsewhere that stretch is walked again in order), so the result
  never depends on the slicing or the number of workers.

A command supplies only the per-slice function and the merge.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from .transfer import Inherited, share, unshare
from .transfer import pool as _transfer_pool
from .walk import resync

__all__ = ["Progress", "Stream", "context", "cut", "inheriting", "pool", "resync", "run", "stop", "worker_init"]

T = TypeVar("T")
R = TypeVar("R")

Progress = Callable[[int], None]
_END = object()


# ---------------------------------------------------------------------------------------
# Plan


def cut(lo: int, hi: int, size: int, *, fold: int = 0) -> list[tuple[int, int]]:
    """The slices ``(start, stop)`` of ``[lo, hi)``: ``size`` bytes each from ``lo``, the
    last one up to ``hi``; a rest of at most ``fold`` bytes after a slice joins that slice
    instead of making a slice of its own. Every byte of the range is in exactly one slice;
    an empty range is one empty slice ``(lo, lo)``."""
    size = max(size, 1)
    out: list[tuple[int, int]] = []
    start = lo
    while True:
        stop = start + size if hi - start > size + fold else hi
        out.append((start, stop))
        if stop >= hi:
            return out
        start = stop


# ---------------------------------------------------------------------------------------
# Resync

# :func:`resync` lives in :mod:`recovery.walk` (the walker uses it too) and is
# re-exported here.


# ---------------------------------------------------------------------------------------
# Pool


@contextmanager
def inheriting(name: str, value: Any, inherit: bool) -> Iterator[Inherited | None]:
    """A large per-run input (e.g. the consume queues' record starts) that forked workers
    read from this process's memory instead of receiving it pickled with every task: the
    token to put in the tasks while the block runs (:func:`recovery.transfer.inherited`
    turns it back into the value in a worker), None when ``value`` is None or not
    ``inherit`` (the tasks then carry their own share). Forgotten on leaving."""
    if value is None or not inherit:
        yield None
        return
    token = share(name, value)
    try:
        yield token
    finally:
        unshare(token)


def worker_init() -> None:
    """(worker side, after :func:`recovery.transfer.worker_init` made it die with its
    parent) Ignore SIGINT: a Ctrl-C reaches the whole process group, and the parent
    decides (it stops the workers and exits 130)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def context(*, inherit: bool = False, preload: Sequence[str] = ()) -> Any:
    """The start method of the workers. ``inherit``: the tasks rely on what the workers
    inherit from this process (:func:`recovery.transfer.share`, an
    :class:`~recovery.transfer.Arena`): fork wherever the platform has it. Otherwise fork
    when this process has no other thread (fast, and no re-import of the caller's main
    module), else a fork server preloading the ``preload`` modules (a fork with threads
    alive, e.g. a progress-bar monitor, could inherit a held lock), else spawn."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and (inherit or threading.active_count() == 1):
        return mp.get_context("fork")
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
        return ctx
    return mp.get_context("spawn")


def pool(workers: int, ctx: Any = None) -> cf.ProcessPoolExecutor:
    """A pool of ``workers`` processes started by ``ctx`` (default :func:`context`) whose
    workers die with this process and ignore SIGINT."""
    ex: cf.ProcessPoolExecutor = _transfer_pool(workers, ctx if ctx is not None else context(), initializer=worker_init)
    return ex


def stop(ex: Any) -> None:
    """Stop a pool now (a failure or Ctrl-C in the parent): queued tasks are cancelled and
    running workers terminated rather than waited for."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    shutdown = getattr(ex, "shutdown", None)
    if shutdown is not None:
        shutdown(wait=False, cancel_futures=True)
    for pr in procs:
        pr.terminate()


def _finish(ex: Any) -> None:
    shutdown = getattr(ex, "shutdown", None)
    if shutdown is not None:
        shutdown(wait=True)


def run(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    jobs: int,
    *,
    make_pool: Callable[[int], Any] | None = None,
    weight: Callable[[T], int] | None = None,
    progress: Progress | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> list[R]:
    """``[fn(t) for t in tasks]``, computed by ``jobs`` worker processes (in this process
    when ``jobs`` <= 1 or there is one task). ``make_pool(n)``: the executor of ``n``
    workers (default :func:`pool`); ``progress(weight(t))`` as each task is done;
    ``meanwhile`` runs in this process while the workers work (before the tasks when there
    is no pool). A task's exception is raised here, after the other workers are stopped."""
    if jobs <= 1 or len(tasks) <= 1:
        if meanwhile is not None:
            meanwhile()
        out = []
        for t in tasks:
            out.append(fn(t))
            if progress is not None and weight is not None:
                progress(weight(t))
        return out
    ex = (make_pool or pool)(min(jobs, len(tasks)))
    results: list[Any] = [None] * len(tasks)
    try:
        futs = {ex.submit(fn, t): i for i, t in enumerate(tasks)}
        if meanwhile is not None:
            meanwhile()
        for fut in cf.as_completed(futs):
            i = futs[fut]
            results[i] = fut.result()
            if progress is not None and weight is not None:
                progress(weight(tasks[i]))
    except BaseException:
        stop(ex)
        raise
    _finish(ex)
    return results


class Stream(Generic[T]):
    """``(t, arg(t), fn(arg(t)))`` for each task, in task order, computed by ``workers`` worker
    processes with at most ``window`` tasks submitted and not yet handed on (every worker
    busy and one more task queued each). ``arg(t)`` (default ``t``) is called as the task
    is submitted (e.g. to give it a shared-memory slot). Use it as a context manager: on
    leaving, what is still queued is cancelled and the running tasks are waited for; on an
    error the workers are stopped at once. :meth:`cancel` drops the queued tasks early
    (the caller goes on in this process)."""

    def __init__(
        self,
        fn: Callable[[Any], R],
        tasks: Iterable[T],
        workers: int,
        *,
        window: int,
        make_pool: Callable[[int], Any] | None = None,
        arg: Callable[[T], Any] | None = None,
    ) -> None:
        self.fn = fn
        self.tasks = tasks
        self.window = max(window, 1)
        self.arg = arg
        self.ex = (make_pool or pool)(workers)
        self.pending: list[tuple[cf.Future[Any], T, Any]] = []

    def __enter__(self) -> Stream[T]:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_exc: object) -> None:
        if kind is None or issubclass(kind, GeneratorExit):
            self.ex.shutdown(wait=True, cancel_futures=True)
        else:
            stop(self.ex)

    def _submit(self, t: T) -> None:
        a = self.arg(t) if self.arg is not None else t
        self.pending.append((self.ex.submit(self.fn, a), t, a))

    def __iter__(self) -> Iterator[tuple[T, Any, Any]]:
        todo = iter(self.tasks)
        for t in todo:
            self._submit(t)
            if len(self.pending) >= self.window:
                break
        while self.pending:
            fut, t, a = self.pending.pop(0)
            nxt = next(todo, _END)
            if nxt is not _END:
                self._submit(nxt)  # type: ignore[arg-type]
            yield t, a, fut.result()

    def cancel(self) -> None:
        for fut, _t, _a in self.pending:
            fut.cancel()
