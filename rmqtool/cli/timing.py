"""``RMQTOOL_TIMING=FILE``: the command's own time, without Python's start-up.

When the variable names a file, the command appends one JSON line to it when it ends:
``{"command", "exit", "wall_s", "cpu_s", "user_s", "sys_s", "children_cpu_s"}``, timed
from the start of the command's work (after the interpreter's start-up, the imports of
the command's module and the parsing of the group's options) to its end. CPU is user + sys
of this process and of its worker processes (``RUSAGE_CHILDREN``: the workers the command
waited for). ``bench/bench_vs_broker.py`` prints it beside the wall time of the process.
Unset or empty: nothing is timed or written.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

_start: tuple[str, float, resource.struct_rusage, resource.struct_rusage] | None = None


def start(command: str | None) -> None:
    """Called when the command's work starts (the group's callback)."""
    global _start
    if os.environ.get("RMQTOOL_TIMING"):
        _start = (
            command or "",
            time.perf_counter(),
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )


def finish(code: int) -> None:
    """Append the line for a command that started (nothing otherwise)."""
    global _start
    path = os.environ.get("RMQTOOL_TIMING")
    if _start is None or not path:
        _start = None
        return
    command, t0, self0, kids0 = _start
    _start = None
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = me.ru_utime - self0.ru_utime + kids.ru_utime - kids0.ru_utime
    sys_ = me.ru_stime - self0.ru_stime + kids.ru_stime - kids0.ru_stime
    children = kids.ru_utime + kids.ru_stime - kids0.ru_utime - kids0.ru_stime
    line = {
        "command": command,
        "exit": code,
        "wall_s": round(wall, 6),
        "cpu_s": round(user + sys_, 6),
        "user_s": round(user, 6),
        "sys_s": round(sys_, 6),
        "children_cpu_s": round(children, 6),
    }
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError as exc:  # the command's own outcome stands
        print(f"rmqtool: RMQTOOL_TIMING: {path}: {exc.strerror or exc}", file=sys.stderr)
