"""Ctrl-C during a destructive command: one line saying whether the store changed and
what the next run will do, and no temporary files left behind.

The change itself is a journaled transaction (``recovery.safety``): interrupted before
it touched the store (staging, backup), it is undone here at once (its staging area and
partial backup removed); interrupted while applying, it is finished here (every step is
idempotent), so the store holds the complete change. Either way nothing is left for the
next run to clean up.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt with the line to print (exit status 130)."""

    def __init__(self, line: str, changed: bool | None = None) -> None:
        super().__init__(line)
        self.line = line
        self.changed = changed  # whether the store changed (None: not known)


def fingerprint(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file of the store (the journal directory left out)."""
    out: dict[str, tuple[int, int]] = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".rmqtool")]
        for name in files:
            p = os.path.join(d, name)
            try:
                st = os.stat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


@contextmanager
def settle_on_interrupt(root: Path, command: str) -> Iterator[None]:
    # start-up time (--help): imported here, before the work, never while handling Ctrl-C
    from ..recovery.safety import pending_journals, recover_pending

    before = fingerprint(root)
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        try:
            try:
                outcomes = recover_pending(root) if pending_journals(root) else []
            except Exception as exc:  # noqa: BLE001 - say what is left; the next run deals with it
                raise Interrupted(
                    f"interrupted: {command} could not settle its change ({exc}); the store may be "
                    f"half changed: the next destructive rmqtool run finishes or undoes it first "
                    f"(rmqtool recover {root} --dry-run shows the state)"
                ) from None
        finally:
            signal.signal(signal.SIGINT, old)
        if any(o.outcome == "completed" for o in outcomes) or fingerprint(root) != before:
            backup = next((o.backup_dir for o in outcomes if o.backup_dir), None)
            raise Interrupted(
                f"interrupted: the store WAS changed: {command} had begun applying its change, which "
                f"was completed (its backup is kept"
                + (f": {backup}" if backup else "")
                + ")"
                + "; the next run starts from the changed store",
                changed=True,
            ) from None
        raise Interrupted(
            f"interrupted: the store was not changed ({command} had not begun applying its change"
            + ("; its temporary files and partial backup were removed" if outcomes else "")
            + "); the next run starts over",
            changed=False,
        ) from None


@contextmanager
def salvage_cleanup(out: Path | None) -> Iterator[None]:
    """Around recover's run with --salvage-to DIR: interrupted while the store was not
    changed (the records are still in the store), the salvage files this run wrote or was
    writing go, and DIR too if this run made it and it is empty; the line says so. (After
    a change they are kept: they hold what was cut.)"""
    if out is None:
        yield
        return
    existed = out.is_dir()
    before = set(os.listdir(out)) if existed else set()
    try:
        yield
    except KeyboardInterrupt as exc:
        changed = getattr(exc, "changed", False)
        if changed is not False:
            raise
        removed = False
        for name in (set(os.listdir(out)) if out.is_dir() else set()) - before:
            if name in ("salvaged.jsonl", "salvaged.bin", "would_be_cut.jsonl") or name.endswith(".tmp"):
                try:
                    os.unlink(out / name)
                    removed = True
                except OSError:
                    pass
        if not existed:
            with suppress(OSError):
                out.rmdir()
        line = getattr(exc, "line", None) or "interrupted; nothing was changed"
        if removed:
            line += f"; the salvage files it had written to {out} were removed"
        raise Interrupted(line, changed=False) from None


__all__ = ["Interrupted", "salvage_cleanup", "settle_on_interrupt"]
