"""Random access to commitlog records: :class:`CommitlogReader` reads the record at a
physical offset, keeping a few files mapped (a leaf of the query modules: :mod:`.query`
and :mod:`.seek` both read through it)."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import check as ck
from .store import MappedFile, Store, StoreFile
from .versions import BrokerProfile

__all__ = ["CommitlogReader", "Located"]


class Located(NamedTuple):
    """A record found at a physical offset: its file, the file's buffer, the position in
    the file and the broker's check outcome (``checked.rec`` is None when undecodable)."""

    file: StoreFile
    buf: Any
    pos: int
    checked: ck.Checked


class CommitlogReader:
    """Reads records at physical offsets, keeping a few files mapped."""

    def __init__(self, store: Store, profile: BrokerProfile, max_open: int = 4) -> None:
        self.store = store
        self.profile = profile
        self.max_open = max_open
        self._maps: dict[str, MappedFile] = {}

    def _map(self, f: StoreFile) -> MappedFile:
        key = str(f.path)
        mf = self._maps.pop(key, None)
        if mf is None:
            mf = self.store.map(f)
            while len(self._maps) >= self.max_open:
                old = next(iter(self._maps))
                self._maps.pop(old).close()
        self._maps[key] = mf  # most recently used last
        return mf

    def record_at(self, offset: int) -> Located | None:
        """The record at ``offset`` as the broker would read it (no CRC check: the caller
        sees ``crc_ok`` in the fields), or None when no commitlog file covers it."""
        if offset < 0:
            return None
        f = self.store.commitlog_file_for(offset)
        if f is None or f.size == 0:
            return None
        mf = self._map(f)
        pos = offset - f.base
        if pos >= mf.size:
            return None
        c = ck.check_record(mf.buf, pos, mf.size, self.profile, check_crc=False, read_body=True)
        return Located(f, mf.buf, pos, c)

    def close(self) -> None:
        for mf in self._maps.values():
            mf.close()
        self._maps.clear()

    def __enter__(self) -> CommitlogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
