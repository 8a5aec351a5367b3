"""The one length rule of the batch decoder (``recovery.batch.layout.length_matches``) is
the broker's: a negative BODYLENGTH counts as 0 (``calMsgLength``'s ``Math.max``), so a
record whose BODYLENGTH is -1 and that holds no body is a message. The batch decoder and
verify's header columns accept it by that rule; the plain test (recover's walk) leaves it to
``check_record``, which accepts it too: every caller ends with the broker's outcome."""

from __future__ import annotations

import struct

import numpy as np
from test_version_behaviour import record

from rmqtool.formats import commitlog as cl
from rmqtool.recovery import check as ck
from rmqtool.recovery.batch import BatchDecoder, Words, plain_records
from rmqtool.recovery.batch.header import header_columns
from rmqtool.recovery.batch.layout import length_matches
from rmqtool.recovery.byteviews import byte_views
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
BODY_LENGTH_AT = 84  # IPv4 born and store hosts (STORE_FORMAT §4)


def _negative_body_length() -> tuple[bytes, int]:
    raw = bytearray(record("T", body=b"", props=b"KEYS\x01k\x02"))
    struct.pack_into(">i", raw, BODY_LENGTH_AT, -1)
    return bytes(raw) + bytes(128), len(raw)


def test_length_rule_counts_a_negative_body_length_as_zero() -> None:
    zero, one = np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64)
    total = cl.cal_msg_length(False, 0, 0, 1, 0)  # no body, a one-byte topic, no properties
    assert length_matches(zero, zero, -one, one, zero, total * one)[0]
    assert not length_matches(zero, zero, -one, one, zero, (total - 1) * one)[0]


def test_negative_body_length_every_caller_ends_with_the_broker_outcome() -> None:
    buf, size = _negative_body_length()
    broker = ck.check_record(buf, 0, size, P494)
    assert broker.is_message and broker.size == size
    starts, totals = np.array([0]), np.array([size])
    # recover's plain test: not plain, so check_record (above) decides
    assert not plain_records(buf, byte_views(buf), starts, totals, P494).ok[0]
    # the batch decoder and verify's header columns: the broker's rule, sure of it
    cols, sure = BatchDecoder(P494, P494.max_delay_level).decode(buf, Words(buf, len(buf)), [0], size, 0)
    assert sure[0] and cols.topic == ["T"] and list(cols.keys) == ["k"]
    h = header_columns(Words(buf, len(buf)), np.frombuffer(buf, dtype=np.uint8), starts, totals, True)
    assert not h.bad[0] and int(h.body_len[0]) == -1 and int(h.topic_len[0]) == 1
