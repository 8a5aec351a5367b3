"""The header layout as numpy tables, per host layout (index ``(SYSFLAG & 0x30) >> 4``:
IPv4 or IPv6 born and store hosts), all from ``formats.commitlog.HEADER_OFFSETS`` (derived
from the construct schemas): the one place the batch decoder, the plain test and verify
take them from."""

from __future__ import annotations

import numpy as np

from ...formats import commitlog as cl

__all__ = ["AT_HOSTS", "FIXED_HOSTS", "HDR_MAX", "V4", "length_matches"]

V4 = cl.HEADER_OFFSETS[0]  # the IPv4/IPv4 layout (the fields before SYSFLAG's hosts never move)
# where STORETIMESTAMP, BODYLENGTH and the body lie, per host layout (they move with the hosts)
AT_HOSTS = {
    k: np.array([o[k] for o in cl.HEADER_OFFSETS], dtype=np.int64) for k in ("store_timestamp", "body_length", "body")
}
# calMsgLength of an empty V1 record per host layout: every byte but body, topic, properties
FIXED_HOSTS = np.array([cl.cal_msg_length(False, h, 0, 0, 0) for h in (0x00, 0x10, 0x20, 0x30)], dtype=np.int64)
HDR_MAX = int(AT_HOSTS["body"].max())  # 112: the longest header (IPv6 born and store hosts)


def length_matches(
    hosts: np.ndarray,
    v2: np.ndarray,
    body_len: np.ndarray,
    topic_len: np.ndarray,
    props_len: np.ndarray,
    total: np.ndarray,
) -> np.ndarray:
    """The broker's length rule (``calMsgLength`` == TOTALSIZE, STORE_FORMAT §9) per record:
    ``hosts`` the host layout index, ``v2`` 1 for a V2 record (two-byte TOPICLENGTH). A
    negative BODYLENGTH or PROPERTIESLENGTH counts as 0, as in the broker
    (``Math.max(bodyLength, 0)``); the callers that leave such a record to ``check_record``
    (the plain test) say so themselves. The one place the rule is written for the batch
    decoder, the plain test and verify."""
    out: np.ndarray = FIXED_HOSTS[hosts] + v2 + np.maximum(body_len, 0) + topic_len + np.maximum(props_len, 0) == total
    return out
