"""The header layout as numpy tables, per host layout (index ``(SYSFLAG & 0x30) >> 4``:
IPv4 or IPv6 born and store hosts), all from ``formats.commitlog.HEADER_OFFSETS`` (derived
from the construct schemas): the one place the batch decoder, the plain test and verify
take them from."""

from __future__ import annotations

import numpy as np

from ...formats import commitlog as cl

__all__ = ["AT_HOSTS", "FIXED_HOSTS", "HDR_MAX", "V4"]

V4 = cl.HEADER_OFFSETS[0]  # the IPv4/IPv4 layout (the fields before SYSFLAG's hosts never move)
# where STORETIMESTAMP, BODYLENGTH and the body lie, per host layout (they move with the hosts)
AT_HOSTS = {k: np.array([o[k] for o in cl.HEADER_OFFSETS], dtype=np.int64) for k in ("store_timestamp", "body_length", "body")}
# calMsgLength of an empty V1 record per host layout: every byte but body, topic, properties
FIXED_HOSTS = np.array([cl.cal_msg_length(False, h, 0, 0, 0) for h in (0x00, 0x10, 0x20, 0x30)], dtype=np.int64)
HDR_MAX = int(AT_HOSTS["body"].max())  # 112: the longest header (IPv6 born and store hosts)
