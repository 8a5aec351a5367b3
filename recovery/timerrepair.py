"""repair's part of the 5.x timer store: keep the timer state consistent with the records
repair keeps.

repair replaces each damaged commitlog region by filler records of the same length
(rmqtool-repair(1)), so every intact record keeps its offset and a timer log unit that points
at an intact timer message still does. A unit that points into a region repair fills (its
record becomes a filler), or past the commitlog's data (its record is gone), would make the
broker's dequeue read a filler as a message to deliver: TimerMessageStore.convertMessage puts
it to its REAL_TOPIC and ``Integer.parseInt`` of its REAL_QID, which a filler lacks, throws;
the put is retried until ``timerSkipUnknownError`` lets it go, so the timer stops there. The
broker leaves such units as they are (and a gone record is a miss it skips).

repair points such a unit at nothing: its commitlog offset (offsetPy, at +28) becomes -1, which
the dequeue cannot read (a miss: the unit is skipped, its message counted lost), while the
unit stays in its slot's chain and the timer log stays one the broker's recovery walks and
revises exactly as before (size, magic, times unchanged). A deviation from the broker,
documented in rmqtool-repair(1) and asserted by tests/test_timers.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import timer as tf
from . import timerstore as ts
from .store import Store
from .versions import BrokerProfile

OFFSET_PY_AT = tf.UNIT_PRE_SIZE_FOR_MSG  # offsetPy's place in a unit (28)
NOWHERE = (-1).to_bytes(8, "big", signed=True)


@dataclass(frozen=True)
class UnitPatch:
    """One timer log unit repair points at nothing: its file, its position in it, the
    commitlog offset it pointed at and why."""

    file: str
    pos: int
    offset_py: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "offset_py": self.offset_py, "why": self.why}


def plan_timer_units(
    store: Store,
    profile: BrokerProfile,
    filled: list[tuple[int, int]],
    data_end: int,
    kept: tuple[np.ndarray, list[str | None]] | None = None,
) -> list[UnitPatch]:
    """The timer log units whose commitlog record repair replaces by a filler (an offset in
    one of ``filled``'s [start, end) ranges) or that is gone (at or past ``data_end``, the end
    of the commitlog's data after repair); with ``kept`` (the start offsets of the records
    repair keeps, sorted, and each one's topic), also the units that point where no kept
    record starts or at a record of another topic than the timer's (verify's
    TIMER_UNIT_PAST_END and TIMER_UNIT_NOT_TIMER): the broker's dequeue would put such a
    record to a real topic it does not name, as it would a filler."""
    if not profile.has_timer_store:
        return []
    tfiles = ts.open_timer_files(store, profile)
    if not tfiles.log_files or tfiles.fatal:
        return []
    out: list[UnitPatch] = []
    starts = np.array([a for a, _b in filled], dtype=np.int64)
    ends = np.array([b for _a, b in filled], dtype=np.int64)
    for f in tfiles.log_files:
        with open(f.path, "rb") as fh:
            data = fh.read(f.size)
        units = tf.read_units(data)
        written = (units["size"] == tf.UNIT_SIZE) & tf.is_magic_ok(units["magic"])
        opy = units["offset_py"].astype(np.int64)
        i = np.searchsorted(starts, opy, side="right") - 1
        inside = (
            (i >= 0) & (opy < np.where(i >= 0, ends[np.clip(i, 0, max(len(ends) - 1, 0))], 0))
            if len(starts)
            else np.zeros(len(opy), dtype=bool)
        )
        gone = opy >= data_end
        other = np.zeros(len(opy), dtype=bool)
        at = np.zeros(len(opy), dtype=np.int64)
        if kept is not None:
            starts, topics = kept
            at = np.clip(np.searchsorted(starts, opy), 0, max(len(starts) - 1, 0))
            found = (starts[at] == opy) if len(starts) else np.zeros(len(opy), dtype=bool)
            timer = np.array([t == tf.TIMER_TOPIC for t in topics], dtype=bool)
            other = ~found | ~(timer[at] if len(starts) else found)
        for k in np.flatnonzero(written & (inside | gone | other) & (opy != -1)).tolist():
            if inside[k]:
                why = "its record is replaced by a filler"
            elif gone[k]:
                why = "its record is gone (past the commitlog's data)"
            elif kept is not None and len(kept[0]) and int(kept[0][at[k]]) == int(opy[k]):
                why = f"it points at a record of {kept[1][at[k]]}, not a timer message"
            else:
                why = "no record starts where it points"
            out.append(UnitPatch(f"{ts.LOG_DIR}/{f.path.name}", k * tf.UNIT_SIZE, int(opy[k]), why))
    return out


def patched_ranges(store: Store, patches: list[UnitPatch]) -> list[tuple[str, int, bytes]]:
    """Per timer log file one write: (file, from, the bytes from there to the last patch's end)."""
    by_file: dict[str, list[UnitPatch]] = {}
    for p in patches:
        by_file.setdefault(p.file, []).append(p)
    out = []
    for rel, ps in sorted(by_file.items()):
        lo = min(p.pos for p in ps) + OFFSET_PY_AT
        hi = max(p.pos for p in ps) + OFFSET_PY_AT + 8
        with open(store.root / rel, "rb") as fh:
            fh.seek(lo)
            buf = bytearray(fh.read(hi - lo))
        for p in ps:
            at = p.pos + OFFSET_PY_AT - lo
            buf[at : at + 8] = NOWHERE
        out.append((rel, lo, bytes(buf)))
    return out
