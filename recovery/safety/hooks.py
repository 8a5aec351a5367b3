"""The crash test hook and the registry of this process's open transactions."""

from __future__ import annotations

import os
from pathlib import Path

from .consts import CRASH_ENV

steps_done = 0
# Journal directories of transactions open in this process: recover_pending skips them.
active_journals: set[Path] = set()


def crash_hook() -> None:
    """Test hook: with ``RMQTOOL_TEST_CRASH_AFTER=N``, die (exit 137, no cleanup, no
    flushing) when N steps have completed. Called before the first step and after each."""
    global steps_done
    limit = os.environ.get(CRASH_ENV)
    if limit is not None and steps_done >= int(limit):
        os._exit(137)
    steps_done += 1
