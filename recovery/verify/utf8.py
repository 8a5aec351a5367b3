"""Which records' properties are not valid UTF-8, for a whole batch at once."""

from __future__ import annotations

import codecs

import numpy as np

from ..batch.properties import nonascii_records

_MAX_BAD = 8  # invalid records located one decode each; beyond, every non-ASCII record is checked


def invalid_utf8_records(J: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """True for the records (properties starting at ``rs`` in the joined bytes ``J``,
    0x02 between records) that are not valid UTF-8 (strict: what ``bytes.decode`` refuses),
    plus, after :data:`_MAX_BAD` such records, every later record holding a byte >= 0x80.
    The separator is ASCII: the joined bytes decode exactly when every record does, and a
    decoding error starts inside the record that holds it; decoding goes on at the next
    record."""
    out = np.zeros(len(rs), dtype=bool)
    if not len(J) or int(J.max()) < 0x80:
        return out
    at = 0
    for _ in range(_MAX_BAD):
        try:
            codecs.utf_8_decode(J[at:].data, "strict", True)
            return out
        except UnicodeDecodeError as exc:
            r = int(np.searchsorted(rs, at + exc.start, side="right")) - 1
        out[r] = True
        if r + 1 >= len(rs):
            return out
        at = int(rs[r + 1])
    out |= nonascii_records(J, rs) & (rs >= at)
    return out
