"""Opening a RocksDB database of the operator's store read-only through rocksdict (the
``rocksdb`` extra) without writing a byte into it.

RocksDB's read-only mode takes no lock and writes nothing, but rocksdict 0.3.29 writes
``rocksdict-config.json`` into whatever directory it opens, read-only too (rocksdict/RocksDict#186
stops that, in no release yet). So the database is opened from a temporary directory of
symbolic links to its files, which lives as long as the database is open (RocksDB opens its
table files lazily). tests/test_rocksdbcq.py hashes the store before and after.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class RocksUnreadable(Exception):
    """rocksdict is not installed, or the database does not open read-only (one line)."""


def _links(path: Path, into: Path) -> None:
    """Symbolic links in ``into`` to the database's own files (not the directories beside
    them: a double-write store's topic directories)."""
    for p in path.iterdir():
        if p.is_file():
            os.symlink(p.resolve(), into / p.name)


@contextmanager
def read_only(path: Path) -> Iterator[tuple[Any, list[str]]]:
    """(the rocksdict ``Rdict`` in raw mode, its column family names), open read-only for the
    ``with`` block; raises :class:`RocksUnreadable`."""
    try:
        from rocksdict import AccessType, Options, Rdict  # optional (the rocksdb extra): imported where used
    except ImportError:
        raise RocksUnreadable("rocksdict is not installed (pip install 'rmqtool[rocksdb]')") from None
    with tempfile.TemporaryDirectory(prefix="rmqtool-rocksdb-") as shadow:
        try:
            _links(path, Path(shadow))
        except OSError as exc:
            raise RocksUnreadable(f"{path}: {exc.strerror or exc}") from None
        try:
            cfs = Rdict.list_cf(shadow)
            db = Rdict(shadow, options=Options(raw_mode=True), access_type=AccessType.read_only())
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exceptions
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RocksUnreadable(f"does not open read-only ({first.replace(shadow, str(path))})") from None
        try:
            yield db, cfs
        finally:
            db.close()


__all__ = ["RocksUnreadable", "read_only"]
