"""Helpers that derive fast readers from Construct schemas, and one place that turns a
Construct failure into a :class:`FormatError`.

The Construct declarations in this package are the single source of truth. Hot loops must
not use them per record (10-40x too slow), so :func:`fixed_prefix_format` walks a schema's
fixed-size leading fields and returns the ``struct`` format string and field names for
them. A test checks that the fast readers and the schemas decode the same bytes alike.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import construct as cs
import numpy as np

from .errors import FormatError


def _flatten(con: cs.Construct, prefix: str, ctx: Mapping[str, Any], fmt: list[str], names: list[str]) -> bool:
    """Append the struct codes of ``con``; return False at the first variable-size field."""
    leaf = ""
    while True:
        if isinstance(con, cs.Renamed):
            leaf = con.name or leaf  # docs (`*`) add another Renamed layer with the same name
            con = con.subcon
        elif isinstance(con, (cs.Rebuild, cs.Const)):
            con = con.subcon
        elif isinstance(con, cs.IfThenElse):
            try:
                cond = con.condfunc(cs.Container(ctx)) if callable(con.condfunc) else con.condfunc
            except KeyError:
                return False  # depends on a field read from the data: variable size
            con = con.thensubcon if cond else con.elsesubcon
        else:
            break
    if isinstance(con, cs.FormatField):
        fmt.append(con.fmtstr[1:])
        names.append(prefix + leaf)
        return True
    if isinstance(con, cs.Bytes) and isinstance(con.length, int):
        fmt.append(f"{con.length}s")
        names.append(prefix + leaf)
        return True
    if isinstance(con, cs.Struct):
        inner = prefix + leaf + "." if leaf else prefix
        return all(_flatten(sub, inner, ctx, fmt, names) for sub in con.subcons)
    return False


def fixed_prefix_format(schema: cs.Construct, ctx: Mapping[str, Any] | None = None) -> tuple[str, list[str]]:
    """Big-endian ``struct`` format and dotted field names of the fixed-size leading fields
    of ``schema``; conditional fields are resolved with ``ctx`` (e.g. ``{"sys_flag": 0x10}``)."""
    fmt: list[str] = []
    names: list[str] = []
    ctx = dict(ctx or {})
    if isinstance(schema, cs.Renamed):
        schema = schema.subcon
    if not isinstance(schema, cs.Struct):
        raise TypeError("fixed_prefix_format needs a Struct")
    for sub in schema.subcons:
        if not _flatten(sub, "", ctx, fmt, names):
            break
    return ">" + "".join(fmt), names


def fixed_struct(schema: cs.Construct, ctx: Mapping[str, Any] | None = None) -> tuple[struct.Struct, list[str]]:
    """:func:`fixed_prefix_format` compiled to a ``struct.Struct``."""
    fmt, names = fixed_prefix_format(schema, ctx)
    return struct.Struct(fmt), names


def field_layout(schema: cs.Construct, ctx: Mapping[str, Any] | None = None) -> list[tuple[str, int, str]]:
    """(dotted name, byte offset, struct code) of each fixed-size leading field of
    ``schema``, derived from :func:`fixed_prefix_format` (conditional fields resolved with
    ``ctx``). Hot loops that gather single fields at computed offsets use this."""
    fmt, names = fixed_prefix_format(schema, ctx)
    out: list[tuple[str, int, str]] = []
    offset = 0
    for code, name in zip(_split_codes(fmt[1:]), names):
        out.append((name, offset, code))
        offset += struct.calcsize(">" + code)
    return out


def numpy_dtype(schema: cs.Construct) -> Any:
    """A packed big-endian numpy structured dtype for a fixed-size schema."""
    fmt, names = fixed_prefix_format(schema)
    codes = {
        "b": "i1",
        "B": "u1",
        "h": ">i2",
        "H": ">u2",
        "i": ">i4",
        "I": ">u4",
        "l": ">i4",
        "L": ">u4",
        "q": ">i8",
        "Q": ">u8",
    }
    fields = []
    for code, name in zip(_split_codes(fmt[1:]), names):
        fields.append((name, codes[code] if code in codes else f"S{code[:-1]}"))
    dt = np.dtype(fields)
    if dt.itemsize != schema.sizeof():
        raise TypeError("schema is not entirely fixed-size")
    return dt


def _split_codes(fmt: str) -> list[str]:
    out: list[str] = []
    num = ""
    for ch in fmt:
        if ch.isdigit():
            num += ch
        else:
            out.append(num + ch)
            num = ""
    return out


def parse_or_raise(
    schema: cs.Construct, data: bytes | memoryview, path: str | None = None, offset: int | None = None
) -> Any:
    """Parse with the full schema; any Construct failure becomes a FormatError naming the
    file, the offset and the schema path where decoding stopped."""
    try:
        return schema.parse(bytes(data))
    except cs.ConstructError as exc:
        cpath = getattr(exc, "path", None)
        msg = str(exc).split("\n")[0]
        raise FormatError(f"cannot decode ({msg})", path, offset, cpath) from None
    except (ValueError, OverflowError, MemoryError) as exc:
        raise FormatError(f"cannot decode ({exc})", path, offset) from None
