"""Java's fixed-width integer arithmetic, where the broker's results depend on it."""

from __future__ import annotations


def java_long(x: int) -> int:
    """``x`` wrapped to a Java long (two's complement, 64 bits): what Java's long
    arithmetic leaves of a sum or product that overflows."""
    return ((x + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)
