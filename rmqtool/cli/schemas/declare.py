"""The declarations the schema files of :mod:`rmqtool.cli.schemas` are written from.

The record types of ``dump`` come from their column specs (:mod:`rmqtool.recovery.records`:
the field names and their types, declared once); the documents, summaries and the other
commands' records are declared in one module per command family (:mod:`.dumps`,
:mod:`.reads`, :mod:`.changes`, :mod:`.diffs`, :mod:`.reports`, on the building blocks of
:mod:`.common`), gathered here (:data:`FILES`). Every object lists its fields: records and summaries
allow no other field (``additionalProperties: false``), so a field added to an output
without its schema (and its man page, which tests/test_schemas.py checks) fails the tests.

``python -m rmqtool.cli.schemas.declare --write`` writes the files; ``--check`` exits 1 when
a file differs from what it would write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .changes import convert, export, rebuild_index, recover, repair, restore
from .diffs import diff
from .dumps import (
    dump_checkpoint,
    dump_commitlog,
    dump_config,
    dump_consumequeue,
    dump_dledger,
    dump_index,
    dump_timercheck,
    dump_timerlog,
    dump_timerwheel,
    timers,
)
from .reads import backups, info, offsets, verify
from .reports import report

HERE = Path(__file__).resolve().parent


FILES = {
    "dump-commitlog": dump_commitlog,
    "dump-consumequeue": dump_consumequeue,
    "dump-index": dump_index,
    "dump-checkpoint": dump_checkpoint,
    "dump-config": dump_config,
    "dump-timerlog": dump_timerlog,
    "dump-timerwheel": dump_timerwheel,
    "dump-timercheck": dump_timercheck,
    "dump-dledger": dump_dledger,
    "timers": timers,
    "verify": verify,
    "info": info,
    "offsets": offsets,
    "backups": backups,
    "recover": recover,
    "repair": repair,
    "rebuild-index": rebuild_index,
    "restore": restore,
    "export": export,
    "convert": convert,
    "diff": diff,
    "report": report,
}


def rendered(name: str) -> str:
    return json.dumps(FILES[name](), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name in FILES:
        path = HERE / f"{name}.json"
        text = rendered(name)
        if "--write" in argv:
            path.write_text(text, encoding="utf-8")
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
    if stale:
        print(f"stale schema files: {', '.join(stale)} (python -m rmqtool.cli.schemas.declare --write)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
