"""Safe access to the files of a store whose contents may be anything.

A damaged or tampered store can hold a FIFO (opening it blocks for ever), a device
(``/dev/zero`` reads without end), a sparse file of many GiB, a dangling or looping
symlink, or a symlink that leaves the store. Every small file (checkpoint, config, lock,
journal) is read through :func:`read_small`, which checks the file type *before* opening
and reads at most a fixed number of bytes; every directory entry is classified with
:func:`classify` (``lstat``, no open) before the store model uses it.
"""

from __future__ import annotations

import os
import stat

from .errors import FormatError

REGULAR = "file"
DIRECTORY = "dir"
MISSING = "missing"


FIFO = "a FIFO, not a regular file"  # classify's ``why`` for a FIFO


def classify(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> tuple[str, str | None]:
    """``(kind, why)`` of ``path`` without opening it: kind is ``file``, ``dir``,
    ``missing`` or ``unsafe``; ``why`` says what makes an entry unsafe (a FIFO, a device,
    a socket, a dangling or looping symlink, a symlink leaving ``root``)."""
    p = os.fspath(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return MISSING, None
    except OSError as exc:
        return "unsafe", f"cannot stat ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.stat(p)
        except FileNotFoundError:
            return "unsafe", dangling_why(p)
        except OSError as exc:
            return "unsafe", f"a symlink that cannot be followed ({exc.strerror})"
        if root is not None:
            real_root = os.path.realpath(root)
            real = os.path.realpath(p)
            if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
                return "unsafe", f"a symlink leaving the store (to {real})"
        st = target
    if stat.S_ISREG(st.st_mode):
        return REGULAR, None
    if stat.S_ISDIR(st.st_mode):
        return DIRECTORY, None
    if stat.S_ISFIFO(st.st_mode):
        return "unsafe", FIFO
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "unsafe", "a device, not a regular file"
    if stat.S_ISSOCK(st.st_mode):
        return "unsafe", "a socket, not a regular file"
    return "unsafe", "not a regular file"


def dangling_why(path: str | os.PathLike[str]) -> str:
    """What a dangling symlink is, its target named as the link holds it: ``a symbolic
    link to X, which does not exist``."""
    try:
        target = os.readlink(path)
    except OSError:
        return "a dangling symbolic link"
    return f"a symbolic link to {target}, which does not exist"


def is_symlink(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def read_small(
    path: str | os.PathLike[str], limit: int, root: str | os.PathLike[str] | None = None, what: str = "file"
) -> bytes | None:
    """The first ``limit`` bytes of a regular file, or None when it does not exist.

    Raises :class:`FormatError` naming the path for anything that is not a regular file
    (checked before opening, so a FIFO never blocks and a device is never read); never
    reads more than ``limit`` bytes whatever the file's size."""
    kind, why = classify(path, root)
    if kind == MISSING:
        return None
    if kind != REGULAR:
        raise FormatError(f"{why or 'not a regular file'}; rmqtool does not open it as a {what}", os.fspath(path))
    try:
        # O_NONBLOCK: a FIFO swapped in after the check still never blocks the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FormatError(f"cannot read ({exc.strerror})", os.fspath(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"not a regular file; rmqtool does not open it as a {what}", os.fspath(path))
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    except OSError as exc:
        raise FormatError(f"cannot read ({exc.strerror})", os.fspath(path)) from None
    finally:
        os.close(fd)


def file_size(path: str | os.PathLike[str]) -> int:
    """Size of a regular file (0 when it is missing)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
