"""The batch decoder's output: a run of dispatch requests in column form."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ...formats.properties import JAVA_REPLACE
from ..indexbuild import DispatchRequest

__all__ = ["DispatchColumns", "IndexKeys", "LazyValues", "PropertyColumns"]


class IndexKeys(NamedTuple):
    """The index keys of a run of records, without the topic prefix, in put order (per
    record: UNIQ_KEY first, then the non-empty pieces of KEYS split on " "): the record
    (row) of each key, its Java hashCode as uint32 and its length in UTF-16 units. The fast
    decoder computes them from the bytes, so no key string is built for the index."""

    rec: np.ndarray
    hash: np.ndarray
    units: np.ndarray


class LazyValues(Sequence[str | None]):
    """Per-record property values (str or None), decoded on first use from the joined
    properties of a run (Java ``new String(bytes, UTF_8)``: replacement, never fails)."""

    __slots__ = ("_n", "_src", "_list")

    def __init__(self, n: int, joined: bytes | np.ndarray, rec: np.ndarray, va: np.ndarray, vb: np.ndarray) -> None:
        self._n = n
        self._src: tuple[bytes | np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = (joined, rec, va, vb)
        self._list: list[str | None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # the fast decoder gives the KEYS and UNIQ_KEY values of a run one uint8 array of
        # the joined properties: pickle protocol 5 carries it once, out of band
        # (recovery.transfer)
        if self._src is None:
            return (_lazy_from_list, (self._list,))
        return (LazyValues, (self._n, *self._src))

    def materialize(self) -> list[str | None]:
        if self._list is None:
            assert self._src is not None
            joined, rec, va, vb = self._src
            if isinstance(joined, np.ndarray):
                joined = joined.tobytes()
            out: list[str | None] = [None] * self._n
            a_l, b_l = va.tolist(), vb.tolist()
            if joined.isascii():
                text = joined.decode("ascii")
                vals = [text[x:y] for x, y in zip(a_l, b_l)]
            else:
                vals = [joined[x:y].decode("utf-8", JAVA_REPLACE) for x, y in zip(a_l, b_l)]
            if len(vals) == self._n:
                out = vals  # type: ignore[assignment]
            else:
                for r, v in zip(rec.tolist(), vals):
                    out[r] = v
            self._list = out
            self._src = None
        return self._list

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self.materialize()[i]

    def __iter__(self) -> Iterator[str | None]:
        return iter(self.materialize())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, LazyValues)) else NotImplemented

    def __repr__(self) -> str:
        return f"LazyValues({self.materialize()!r})"


def _lazy_from_list(values: list[str | None]) -> LazyValues:
    out = LazyValues(
        len(values), b"", np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    )
    out._list, out._src = values, None
    return out


class PropertyColumns(NamedTuple):
    """What the decoder found in the properties of a run of records
    (:meth:`BatchDecoder.properties`): per record the tagsCode, the KEYS and UNIQ_KEY
    values, the index keys hashed (None when not wanted), the records to leave to
    ``check_record``; the joined properties (``joined``: each record's properties, 0x02
    between records) and where each wanted name's value lies in them (``found``: name ->
    (record, value start, value end))."""

    tags_code: np.ndarray
    keys: LazyValues
    uniq: LazyValues
    index_keys: IndexKeys | None
    odd: list[int]
    joined: np.ndarray
    found: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]]
    tags: LazyValues | None = None  # the TAGS values


class DispatchColumns(NamedTuple):
    """A run of dispatch requests (the broker's ``DispatchRequest``), one row per valid
    record, in commitlog order. ``position`` is where the record was read (file base +
    position in the file); ``commitlog_offset`` is its PHYSICALOFFSET *field*, which the
    broker uses for the CQ and index entries (RECOVERY §2 notes). ``keys`` and
    ``uniq_key`` are sequences of str or None (decoded lazily on the fast path);
    ``index_keys``, when present, are the index keys already hashed (:func:`feed_index`
    uses them)."""

    position: np.ndarray
    topic: list[str]
    queue_id: np.ndarray
    commitlog_offset: np.ndarray
    msg_size: np.ndarray
    tags_code: np.ndarray
    store_timestamp: np.ndarray
    consume_queue_offset: np.ndarray
    keys: Sequence[str | None]
    uniq_key: Sequence[str | None]
    sys_flag: np.ndarray
    index_keys: IndexKeys | None = None
    tags: Sequence[str | None] | None = None  # TAGS values (5.4.0+ index keys); None: not read

    def tag_values(self) -> Sequence[str | None]:
        """The TAGS values, one per row (all None where the run did not read them)."""
        return self.tags if self.tags is not None else [None] * self.count

    @property
    def count(self) -> int:  # type: ignore[override]  # (tuple.count is not used on a run)
        """The number of rows."""
        return len(self.topic)

    def select(self, mask: np.ndarray) -> DispatchColumns:
        """The rows where ``mask`` is True."""
        mask = np.asarray(mask, dtype=bool)
        idx = np.flatnonzero(mask).tolist()
        keys = list(self.keys)
        uniq = list(self.uniq_key)
        tags = list(self.tags) if self.tags is not None else None
        ik = None
        if self.index_keys is not None:
            new_row = np.cumsum(mask) - 1
            kk = mask[self.index_keys.rec]
            ik = IndexKeys(new_row[self.index_keys.rec[kk]], self.index_keys.hash[kk], self.index_keys.units[kk])
        return DispatchColumns(
            self.position[mask],
            [self.topic[i] for i in idx],
            self.queue_id[mask],
            self.commitlog_offset[mask],
            self.msg_size[mask],
            self.tags_code[mask],
            self.store_timestamp[mask],
            self.consume_queue_offset[mask],
            [keys[i] for i in idx],
            [uniq[i] for i in idx],
            self.sys_flag[mask],
            ik,
            [tags[i] for i in idx] if tags is not None else None,
        )

    def requests(self) -> Iterator[DispatchRequest]:
        """The rows as :class:`recovery.indexbuild.DispatchRequest` objects."""
        keys = list(self.keys)
        uniq = list(self.uniq_key)
        tags = list(self.tag_values())
        for i in range(self.count):
            yield DispatchRequest(
                self.topic[i],
                int(self.queue_id[i]),
                int(self.commitlog_offset[i]),
                int(self.msg_size[i]),
                int(self.tags_code[i]),
                int(self.store_timestamp[i]),
                int(self.consume_queue_offset[i]),
                keys[i],
                uniq[i],
                int(self.sys_flag[i]),
                tags[i],
            )

    @staticmethod
    def from_rows(positions: Sequence[int], rows: Sequence[DispatchRequest]) -> DispatchColumns:
        def i64(xs: Iterable[int]) -> np.ndarray:
            return np.fromiter(xs, dtype=np.int64, count=len(rows))

        return DispatchColumns(
            i64(positions),
            [r.topic for r in rows],
            i64(r.queue_id for r in rows),
            i64(r.commitlog_offset for r in rows),
            i64(r.msg_size for r in rows),
            i64(r.tags_code for r in rows),
            i64(r.store_timestamp for r in rows),
            i64(r.consume_queue_offset for r in rows),
            [r.keys for r in rows],
            [r.uniq_key for r in rows],
            i64(r.sys_flag for r in rows),
            None,
            [r.tags for r in rows],
        )

    @staticmethod
    def concat(parts: Sequence[DispatchColumns]) -> DispatchColumns:
        """One run of all the rows (``index_keys`` is dropped)."""
        if not parts:
            return DispatchColumns.from_rows([], [])
        out: list[Any] = []
        for i, name in enumerate(DispatchColumns._fields):
            if name == "index_keys":
                out.append(None)
                continue
            if name == "tags":
                out.append([x for p in parts for x in p.tag_values()])
                continue
            vals: list[Any] = [p[i] for p in parts]
            if isinstance(vals[0], np.ndarray):
                out.append(np.concatenate(vals))
            else:
                out.append([x for v in vals for x in v])
        return DispatchColumns(*out)
