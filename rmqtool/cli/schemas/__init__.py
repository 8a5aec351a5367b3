"""The JSON Schemas of every command's machine output, installed with the package.

One file per command (``dump-commitlog.json``, ``verify.json``, ...; :data:`NAMES`), each
with ``$defs``: ``document`` (what ``--format json`` prints), one definition per record type
(``message``, ``finding``, ``change``, ...), ``summary`` (the record ``--format jsonl``
ends with) and ``line`` (any line of ``--format jsonl``: the summary when its ``type`` is
"summary", else one of the record types). The files are written by :mod:`.declare` from
the record specs of :mod:`rmqtool.recovery.records` and the declarations there
(``python -m rmqtool.cli.schemas.declare --write``); tests/test_schemas.py checks that
they are current and validates every command's output on every fixture against them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = (
    "dump-commitlog",
    "dump-consumequeue",
    "dump-index",
    "dump-checkpoint",
    "dump-config",
    "dump-timerlog",
    "dump-timerwheel",
    "dump-timercheck",
    "dump-dledger",
    "timers",
    "verify",
    "info",
    "offsets",
    "backups",
    "recover",
    "repair",
    "rebuild-index",
    "restore",
    "export",
    "convert",
    "report",
    "diff",
)


def load(name: str) -> dict[str, Any]:
    """The schema of command ``name`` (``dump commitlog`` or ``dump-commitlog``, ``verify``...)."""
    name = name.replace(" ", "-")
    if name not in NAMES:
        raise KeyError(name)
    doc: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return doc


def part(name: str, which: str) -> dict[str, Any]:
    """A schema that validates ``which`` (``document``, ``line``, ``summary`` or a record
    type) of command ``name``: the file's ``$defs`` with a reference to that one."""
    doc = load(name)
    return {"$schema": doc["$schema"], "$defs": doc["$defs"], "$ref": f"#/$defs/{which}"}


__all__ = ["NAMES", "load", "part"]
