"""The tests' reference walk: the broker's per-file recovery walk record by record
(``check_record`` at every record, the walk moving by each message's size), written here
apart from recovery/walk.py so that the walker's results (its runs, its one-by-one path)
are compared with a loop of their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rmqtool.recovery import check as ck
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.recovery.walks import WalkStep


def walk_file(
    buf: Any,
    end: int,
    profile: BrokerProfile,
    *,
    start: int = 0,
    check_crc: bool = True,
    read_body: bool = True,
    max_delay_level: int | None = None,
) -> Iterator[WalkStep]:
    """Every valid message from ``start``, then the BLANK or failure that stops the walk
    (none when it runs exactly to ``end``)."""
    pos = start
    while pos < end:
        c = ck.check_record(
            buf, pos, end, profile, check_crc=check_crc, read_body=read_body, max_delay_level=max_delay_level
        )
        yield WalkStep(pos, c)
        if not c.is_message:
            return
        pos += c.size
