"""Both dispatchers fed from one request stream: :class:`ReputWriters`."""

from __future__ import annotations

from collections.abc import Iterable

from .builder import IndexBuilder
from .common import DispatchRequest, batches, gc_paused, i64
from .cq import ConsumeQueueSet

# =============================================================================================
# Both
# =============================================================================================


class ReputWriters:
    """The CQ and Index dispatchers fed from one request stream (RECOVERY §9.1)."""

    def __init__(
        self,
        cq: ConsumeQueueSet | None = None,
        index: IndexBuilder | None = None,
        message_index_enable: bool = True,
    ) -> None:
        self.cq = cq if cq is not None else ConsumeQueueSet()
        self.index = index if index is not None else IndexBuilder()
        self.message_index_enable = message_index_enable

    def add(self, requests: Iterable[DispatchRequest], batch: int = 1 << 16) -> None:
        """Dispatch requests in stream order to the CQ and Index writers."""
        for c in batches(requests, batch):
            with gc_paused():
                flags = i64(c[9])
                off = i64(c[2])
                ts = i64(c[5])
            self.cq.add_columns(c[0], c[1], off, c[3], c[4], c[6], flags, ts)
            if self.message_index_enable:
                self.index.add_columns(c[0], off, ts, c[7], c[8], flags, tags=c[10])
