"""walks.broker_walk (the per-file walk without a record per message) has exactly the outcome
of the broker's walk record by record (tests/walkref.py: check_record at every record): same record starts, same
stop position and the same stop, on the real 4.9.4 stores and on damaged copies, under the
4.x and 5.x rules and with the CRC and body reads on or off."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from walkref import walk_file

from rmqtool.recovery.check import Checked
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.recovery.walks import broker_walk as fast_walk

# every test once with the compiled core and once with its pure-Python twin (recovery/ccore.py)
pytestmark = pytest.mark.usefixtures("ccore_backend")

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"


def _files() -> list[bytes]:
    out = []
    for scenario in ("clean", "delay", "crash_midwrite"):
        for p in sorted((REAL / scenario / "store" / "commitlog").iterdir()):
            out.append(p.read_bytes())
    return out


def _broker_walk(buf: bytes, end: int, profile: BrokerProfile, **kw: bool) -> tuple[list[int], int, Checked | None]:
    starts: list[int] = []
    stop: Checked | None = None
    pos = 0
    for step in walk_file(buf, end, profile, **kw):
        if not step.checked.is_message:
            stop, pos = step.checked, step.pos
            break
        starts.append(step.pos)
        pos = step.pos + step.checked.size
    return starts, pos, stop


def _damaged(buf: bytes, rng: random.Random, n: int) -> list[bytes]:
    """Copies with one byte changed at a random place among the written records."""
    used = len(buf.rstrip(b"\0")) or 1
    out = []
    for _ in range(n):
        b = bytearray(buf)
        at = rng.randrange(used)
        b[at] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("version", ["4.6.0", "4.9.4", "5.3.3"])
@pytest.mark.parametrize("opts", [{}, {"check_crc": False}, {"check_crc": False, "read_body": False}])
def test_fast_walk_is_the_broker_walk(version: str, opts: dict[str, bool]) -> None:
    profile = BrokerProfile.for_version(version)
    rng = random.Random(f"{version}{sorted(opts.items())}")
    bufs = []
    for buf in _files():
        bufs.append(buf)
        bufs += _damaged(buf, rng, 4)
    stops = set()
    for buf in bufs:
        end = len(buf)
        # a memoryview, as the callers' mmaps are (with bytes the 5.x INNER_ probe calls
        # bytes.tobytes: left to the batch decoder that replaces this walk)
        w = fast_walk(memoryview(buf), end, profile, collect=True, **opts)
        starts, stop_pos, stop = _broker_walk(buf, end, profile, **opts)
        assert list(w.starts) == starts
        assert w.count == len(starts)
        assert w.stop_pos == stop_pos
        assert w.stop == stop
        stops.add(None if stop is None else stop.reason)
    assert len(stops) > 1  # the damaged copies stop the walk for more than one reason
