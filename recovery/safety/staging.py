"""Staging: a transaction's new content written into its journal before the commit."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from .apply import copy_holes_kept
from .consts import Data
from .digests import BIG_CHUNK, HashingFile
from .paths import copy_owner


def dry_run_content(data: Data) -> tuple[str | None, int | None, str | None]:
    """What a dry run knows of new content without writing it: (no staged name, size,
    sha256) for bytes, the size only for a path, nothing for a writer."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        b = bytes(data)
        return None, len(b), hashlib.sha256(b).hexdigest()
    if isinstance(data, os.PathLike):
        return None, os.stat(data).st_size, None
    if not callable(data):
        raise TypeError(f"new content must be bytes, a path or a writer, not {type(data).__name__}")
    return None, None, None


def write_staged(dst: Path, data: Data, mode: int, h: Any, owner_ref: Path, mtime_ns: int | None) -> int:
    """Write the staged file and give it its mode, owner and mtime (the transaction fsyncs
    its staged files together before the commit)."""
    with open(dst, "x+b") as f:
        if isinstance(data, (bytes, bytearray, memoryview)):
            h.update(data if isinstance(data, bytes) else bytes(data))
            f.write(data)
        elif isinstance(data, os.PathLike):
            copy_holes_kept(Path(data), f, h)
        elif callable(data):
            hf = HashingFile(f, h)
            data(hf)  # type: ignore[arg-type]
            f.flush()
            if not hf.sequential:
                h.reset()
                f.seek(0)
                while chunk := f.read(BIG_CHUNK):
                    h.update(chunk)
        else:
            raise TypeError(f"new content must be bytes, a path or a writer, not {type(data).__name__}")
        f.flush()
        os.fchmod(f.fileno(), mode)
        copy_owner(dst, owner_ref)
        if mtime_ns is not None:
            os.utime(f.fileno(), ns=(mtime_ns, mtime_ns))
        return os.fstat(f.fileno()).st_size
