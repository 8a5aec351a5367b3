"""The config files the broker's start loads, and the one it would block on."""

from __future__ import annotations

from pathlib import Path

from ..formats.safeio import FIFO, MISSING, REGULAR, classify

# the config files every broker's start loads (BrokerController.initialize, and the
# schedule service's delayOffset.json), each with ConfigManager.load -> MixAll.file2String
START_CONFIGS = (
    "topics.json",
    "consumerOffset.json",
    "subscriptionGroup.json",
    "consumerFilter.json",
    "delayOffset.json",
)


def config_blocking_start(root: Path) -> str | None:
    """The config file (``config/NAME``) the broker's start blocks on, or None: each of
    :data:`START_CONFIGS` is read by ``MixAll.file2String``, whose ``FileInputStream`` on a
    FIFO waits for a writer, so the start never gets past it; its ``.bak`` is read (and
    blocks the same way) when the file is missing or empty. rmqtool never opens either."""
    cdir = root / "config"
    for name in START_CONFIGS:
        kind, why = classify(cdir / name, root)
        if kind == "unsafe" and why == FIFO:
            return f"config/{name}"
        if kind == MISSING or (kind == REGULAR and (cdir / name).stat().st_size == 0):
            kind, why = classify(cdir / f"{name}.bak", root)
            if kind == "unsafe" and why == FIFO:
                return f"config/{name}.bak"
    return None
