"""The pieces the consume queue and index writers share: the numpy layouts derived from the
Construct schemas, :class:`DispatchRequest`, file naming and sizes, and the batching helpers."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any, NamedTuple, ParamSpec, TypeVar

import numpy as np

from ...formats.consumequeue import CQ_DTYPE
from ...formats.indexfile import ENTRY_DTYPE, HEADER_DTYPE

# ---------------------------------------------------------------------------------------------
# numpy layouts: the ones derived from the Construct schemas (formats/consumequeue.py and
# formats/indexfile.py), under the names this module has always used.
cq_unit_dtype = CQ_DTYPE
index_entry_dtype = ENTRY_DTYPE
index_header_dtype = HEADER_DTYPE

CQ_UNIT_SIZE = 20
FILL_BLANK_SIZE = 0x7FFFFFFF
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INT_MAX = 0x7FFFFFFF
I64_MIN = np.iinfo(np.int64).min


class DispatchRequest(NamedTuple):
    """What the dispatchers need from one commitlog record (DispatchRequest in the broker)."""

    topic: str
    queue_id: int
    commitlog_offset: int  # the record's PHYSICALOFFSET field
    msg_size: int  # TOTALSIZE
    tags_code: int  # already final (delay rule applied by the caller)
    store_timestamp: int  # ms
    consume_queue_offset: int  # the record's QUEUEOFFSET field
    keys: str | None  # raw KEYS property value
    uniq_key: str | None  # UNIQ_KEY property value
    sys_flag: int
    tags: str | None = None  # TAGS property value (5.4.0+ indexes it: BrokerProfile.indexes_tags)


def cq_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: at least 20 digits, zero padded (sign first if negative)."""
    return f"{offset:020d}" if offset >= 0 else "-" + f"{-offset:020d}"


def index_file_size(slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def java_rem(a: int, b: int) -> int:
    """Java's ``%`` on longs (remainder truncated toward zero)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def first_false(mask: np.ndarray) -> int:
    """Index of the first False in a bool array, or its length."""
    bad = np.flatnonzero(~mask)
    return int(bad[0]) if len(bad) else len(mask)


def concat(chunks: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Concatenate structured arrays keeping ``dtype`` exactly (np.concatenate would promote
    big-endian structured dtypes to native byte order). Chunks of exactly ``dtype`` are
    copied as raw bytes (a structured element-wise copy is several times slower)."""
    out = np.empty(sum(len(c) for c in chunks), dtype=dtype)
    raw = out.view(np.uint8)
    w = dtype.itemsize
    p = 0
    for c in chunks:
        if c.dtype == dtype:
            raw[p * w : (p + len(c)) * w] = np.ascontiguousarray(c).view(np.uint8)
        else:
            out[p : p + len(c)] = c
        p += len(c)
    return out


def rows_to_struct(rows: Sequence[tuple[int, ...]], dtype: np.dtype) -> np.ndarray:
    """Integer tuples (one field of ``dtype`` each, in its field order) as one structured array:
    the scalar puts a writer collected, in one copy."""
    a = np.array(rows, dtype=np.int64).reshape(-1, len(dtype.names or ()))
    out = np.empty(len(a), dtype=dtype)
    for i, name in enumerate(dtype.names or ()):
        out[name] = a[:, i]
    return out


def stable_order(slots: np.ndarray, slot_num: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, slots[order])`` with ``order = argsort(slots, kind="stable")`` for slots in
    ``[0, slot_num)``: one plain sort of ``slot << b | position`` (unique keys, so any sort
    is stable; several times faster than numpy's stable argsort) when the bits fit."""
    m = len(slots)
    b = max(1, (m - 1).bit_length())
    if m == 0 or int(slot_num).bit_length() + b > 62:
        order = np.argsort(slots, kind="stable")
        return order, slots[order]
    k = slots.astype(np.int64) << b
    k |= np.arange(m, dtype=np.int64)
    k.sort()
    return k & ((1 << b) - 1), k >> b


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while converting a batch: the batch allocates many small
    acyclic objects, and with millions of live requests every collection is expensive."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


P = ParamSpec("P")
R = TypeVar("R")


def gc_paused_call(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` run under :func:`gc_paused` (the column forms of the writers' ``add``)."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with gc_paused():
            return method(*args, **kwargs)

    return run


class TopicList(list):  # type: ignore[type-arg]
    """A list of topic names that may carry what :func:`distinct_ids` computes (``distinct``: the
    distinct names in first-seen order, ``ids``: the int64 id of every element), set by a
    producer that already knows them (the reput's fast decoder). Any other list works too."""

    distinct: list[str] | None = None
    ids: np.ndarray | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # with ids: the names once and the ids as one array (pickle protocol 5 carries the
        # array out of band), not one reference per element
        if self.ids is not None and self.distinct is not None and len(self.ids) == len(self):
            return (_topic_list_from_ids, (self.distinct, self.ids))
        return (TopicList, (list(self),))


def write_zeros(fileobj: Any, n: int, block: int = 1 << 24) -> None:
    """``n`` zero bytes to a binary file object: through its own ``write_zeros`` where it
    has one (recovery.safety's staging file leaves a hole), else written in blocks."""
    if n <= 0:
        return
    own = getattr(fileobj, "write_zeros", None)
    if own is not None:
        own(n)
        return
    zero = bytes(min(n, block))
    while n > 0:
        k = min(n, block)
        fileobj.write(zero[:k])
        n -= k


def take_names(names: list[str], ids: np.ndarray) -> list[str]:
    """``[names[i] for i in ids]`` through an object array (about 3x faster than a map)."""
    arr = np.empty(len(names), dtype=object)
    arr[:] = names
    return arr[ids].tolist()  # type: ignore[no-any-return]


def _topic_list_from_ids(distinct: list[str], ids: np.ndarray) -> TopicList:
    out = TopicList(take_names(distinct, ids))
    out.distinct, out.ids = distinct, ids
    return out


def distinct_ids(values: Sequence[Any]) -> tuple[list[Any], np.ndarray]:
    """Distinct values in first-seen order, and the id of every element (C-speed maps)."""
    if type(values) is TopicList and values.ids is not None and len(values.ids) == len(values):
        return values.distinct, values.ids  # type: ignore[return-value]
    distinct = list(dict.fromkeys(values))
    ids = {v: i for i, v in enumerate(distinct)}
    return distinct, np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=len(values))


def _transpose(chunk: Sequence[DispatchRequest]) -> list[tuple[Any, ...]]:
    cols = list(zip(*chunk))
    if len(cols) != len(DispatchRequest._fields):
        raise ValueError("dispatch requests must have the DispatchRequest fields")
    return cols


def batches(requests: Iterable[DispatchRequest], batch: int) -> Iterator[list[tuple[Any, ...]]]:
    it = iter(requests)
    while True:
        with gc_paused():
            chunk = list(islice(it, batch))
            if not chunk:
                return
            cols = _transpose(chunk)
            del chunk
        yield cols


def i64(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return values
    if isinstance(values, np.ndarray):
        return values.astype(np.int64)
    if not isinstance(values, (list, tuple)):
        values = list(values)
    return np.fromiter(values, dtype=np.int64, count=len(values))
