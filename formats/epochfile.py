"""The controller-mode epoch file, ``epochFileCheckpoint`` (5.0+; NEW_FORMATS.md, "Controller
mode"), as RocketMQ's ``CheckpointFile`` (rocketmq-common, 5.0-5.5.1) writes and reads it.

A text file of lines, each ended by ``System.lineSeparator()`` ("\\n" on Linux):

* line 1: the number of entries (``Integer.parseInt``);
* line 2: the CRC of the entry lines (``UtilAll.crc32``: CRC-32 masked to 31 bits) over
  every entry line with a "\\n" after it, in UTF-8; 0 means "not checked";
* then one line per entry, ``epoch-startOffset`` (``EpochFileCache.EpochEntrySerializer``:
  ``String.format("%d-%d")``; read back with ``line.split("-")``, exactly two parts,
  ``Integer.parseInt`` and ``Long.parseLong``).

``CheckpointFile.write`` goes through ``MixAll.string2File``: the previous content is copied
to ``epochFileCheckpoint.bak`` and then the file is rewritten in place (not through a
temporary file: a crash in between can leave it short or empty).

Reading (``CheckpointFile.read``), as the broker does it, checked against its own code by
the oracle (tests/oracle/test_replicas_oracle.py):

* a missing file reads as no entries;
* lines end at "\\n", "\\r" or "\\r\\n" (``BufferedReader.readLine``); the CRC is taken over
  the lines read with "\\n" after each, so "\\r\\n" files pass;
* an entry line that does not split into two parts (an empty line, ``1-2-3``) is skipped
  but still counted in the CRC (``1-2-`` splits into two: Java drops trailing empty parts);
* a count that differs from the entries read, a CRC mismatch (CRC line not 0) or malformed
  UTF-8 is an ``IOException``: the ``.bak`` is read instead;
* a main file that reads as no entries (missing, or a count of 0) also falls back to the
  ``.bak``;
* a line that is not a Java number where one is needed (an empty file: ``parseInt(null)``;
  a count of ``abc``; an entry ``x-5``) is a ``NumberFormatException``, which
  ``CheckpointFile.read`` does not catch: ``EpochFileCache.initCacheFromFile`` does not
  either, so ``AutoSwitchHAService.init`` throws and the broker's store does not start. An
  empty (zero-length) main file is thus *not* replaced by its ``.bak``;
* an ``IOException`` from the ``.bak`` too is caught by ``initCacheFromFile``, which leaves the
  cache empty (the broker then starts with no epochs).

Only the stdlib is imported here (and formats.crc).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .crc import crc32_fast
from .errors import FormatError
from .safeio import read_small

EPOCH_FILE = "epochFileCheckpoint"
BAK_SUFFIX = ".bak"
LINE_SEPARATOR = "\n"  # System.lineSeparator() on the platforms brokers run on
NOT_CHECKED_CRC = 0  # CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE
# Files larger than this are not judged: the broker's reader decodes in 8 KiB steps, so where
# a malformed byte sits against a bad number would decide which exception comes first.
READ_LIMIT = 8192
INT_BITS, LONG_BITS = 32, 64

_LINE_END = re.compile("\r\n|\r|\n")


class JavaIOError(Exception):
    """What the broker's reader raises as an ``IOException`` (it then reads the .bak)."""


class JavaNumberFormat(Exception):
    """A ``NumberFormatException``: nothing catches it, the broker's start fails."""


def java_parse(text: str | None, bits: int) -> int:
    """``Integer.parseInt`` (bits 32) / ``Long.parseLong`` (64): an optional sign, then
    decimal digits (any Unicode decimal digit, as ``Character.digit``), in range; anything
    else (None, "", spaces, "_") raises :class:`JavaNumberFormat`."""
    if text is None:
        raise JavaNumberFormat("Cannot parse null string")
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not all(ch.isdecimal() for ch in body):
        raise JavaNumberFormat(f'For input string: "{text}"')
    value = int(text)
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise JavaNumberFormat(f'For input string: "{text}"')
    return value


def java_lines(text: str) -> list[str]:
    """``BufferedReader.readLine`` until null: lines end at \\r\\n, \\r or \\n; a last line
    without an end is a line; nothing after a final line end."""
    parts = _LINE_END.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def java_split_dash(line: str) -> list[str]:
    """``line.split("-")``: trailing empty strings removed (a leading one kept)."""
    parts = line.split("-")
    while parts and parts[-1] == "":
        parts.pop()
    return parts or [""]


@dataclass(frozen=True)
class Parsed:
    """One file as ``CheckpointFile.read(String)`` reads it: ``entries`` (epoch, start) in
    file order; the count and CRC lines as written; the CRC computed; the lines skipped."""

    entries: tuple[tuple[int, int], ...]
    count: int
    crc: int
    crc_computed: int
    skipped: tuple[str, ...] = ()


def parse(data: bytes) -> Parsed:
    """The bytes of one epoch file as ``CheckpointFile.read(String)`` reads them; raises
    :class:`JavaIOError` or :class:`JavaNumberFormat` where it throws."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JavaIOError(f"malformed UTF-8 at byte {exc.start} (MalformedInputException)") from None
    lines = java_lines(text)
    it = iter(lines)
    count = java_parse(next(it, None), INT_BITS)
    crc = java_parse(next(it, None), INT_BITS)
    entries: list[tuple[int, int]] = []
    skipped: list[str] = []
    body = []
    for line in it:
        body.append(line + LINE_SEPARATOR)
        parts = java_split_dash(line)
        if len(parts) == 2:
            entries.append((java_parse(parts[0], INT_BITS), java_parse(parts[1], LONG_BITS)))
        else:
            skipped.append(line)
    computed = crc32_fast("".join(body).encode("utf-8"))
    if len(entries) != count:
        raise JavaIOError(f"Expect {count} entries, only found {len(entries)} entries")
    if crc != NOT_CHECKED_CRC and computed != crc:
        raise JavaIOError(f"Entries crc32 not match, file={crc}, truth={computed}")
    return Parsed(tuple(entries), count, crc, computed, tuple(skipped))


@dataclass(frozen=True)
class EpochFileRead:
    """``CheckpointFile.read()`` of a store's epoch file and its ``.bak``.

    ``source``: "main", "bak" or None (no entries from either); ``entries`` (epoch, start)
    in file order; ``main_problem``/``bak_problem``: why a file was not used (None: it was,
    or it is missing); ``fatal``: the ``NumberFormatException`` that stops the broker's
    start (then ``entries`` is empty); ``cache_empty_why``: an ``IOException`` of the .bak
    after the main file's, which ``initCacheFromFile`` swallows (the broker starts with no
    epochs)."""

    path: str
    present: bool
    bak_present: bool
    source: str | None
    entries: tuple[tuple[int, int], ...]
    main: Parsed | None = None
    bak: Parsed | None = None
    main_problem: str | None = None
    bak_problem: str | None = None
    fatal: str | None = None
    cache_empty_why: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)


def _read_one(path: str) -> tuple[Parsed | None, bool, int]:
    """(parsed or None when missing, present, size); raises Java* or FormatError."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, False, 0
    except OSError as exc:
        raise JavaIOError(f"cannot read ({exc.strerror})") from None
    if st.st_size > READ_LIMIT:
        raise FormatError(
            f"{st.st_size} bytes: an epoch file this large is not judged (the broker writes a few dozen bytes a line)",
            path,
        )
    data = read_small(path, READ_LIMIT + 1, what="epoch file")
    if data is None:
        return None, False, 0
    return parse(data), True, len(data)


def read_epoch_file(root: str | os.PathLike[str], name: str = EPOCH_FILE) -> EpochFileRead:
    """The epoch file of the store at ``root`` (``storePathEpochFile``, default
    ``STORE/epochFileCheckpoint``) as the broker's start reads it (see the module)."""
    path = os.path.join(os.fspath(root), name)
    bak = path + BAK_SUFFIX
    present = os.path.lexists(path)
    bak_present = os.path.lexists(bak)
    main: Parsed | None = None
    main_problem: str | None = None
    try:
        main, present, _ = _read_one(path)
    except JavaNumberFormat as exc:
        return EpochFileRead(path, present, bak_present, None, (), fatal=f"{name}: NumberFormatException: {exc}")
    except JavaIOError as exc:
        main_problem = str(exc)
    if main is not None and main.entries:
        return EpochFileRead(path, present, bak_present, "main", main.entries, main=main)
    if main is not None:
        main_problem = "no entries"
    try:
        b, bak_present, _ = _read_one(bak)
    except JavaNumberFormat as exc:
        return EpochFileRead(
            path,
            present,
            bak_present,
            None,
            (),
            main=main,
            main_problem=main_problem,
            fatal=f"{name}{BAK_SUFFIX}: NumberFormatException: {exc}",
        )
    except JavaIOError as exc:
        # (read() catches the .bak's IOException once and reads it again; the second one
        # reaches initCacheFromFile, which swallows it: no epochs)
        return EpochFileRead(
            path,
            present,
            bak_present,
            None,
            (),
            main=main,
            main_problem=main_problem,
            bak_problem=str(exc),
            cache_empty_why=f"{name}: {main_problem}; {name}{BAK_SUFFIX}: {exc}",
        )
    if b is None or not b.entries:
        return EpochFileRead(
            path,
            present,
            bak_present,
            None,
            (),
            main=main,
            bak=b,
            main_problem=main_problem if present else None,
            bak_problem=("no entries" if b is not None else None),
        )
    return EpochFileRead(path, present, bak_present, "bak", b.entries, main=main, bak=b, main_problem=main_problem)


def serialize(entries: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> bytes:
    """``CheckpointFile.write``: the count line, the CRC line, the entry lines (an empty list
    writes nothing: the caller keeps the file as it is)."""
    body = "".join(f"{e}-{s}{LINE_SEPARATOR}" for e, s in entries)
    crc = crc32_fast(body.encode("utf-8"))
    return f"{len(entries)}{LINE_SEPARATOR}{crc}{LINE_SEPARATOR}{body}".encode()


__all__ = [
    "BAK_SUFFIX",
    "EPOCH_FILE",
    "EpochFileRead",
    "JavaIOError",
    "JavaNumberFormat",
    "Parsed",
    "java_lines",
    "java_parse",
    "java_split_dash",
    "parse",
    "read_epoch_file",
    "serialize",
]
