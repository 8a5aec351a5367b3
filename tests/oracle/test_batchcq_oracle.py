"""BatchConsumeQueue (5.x topics with ``queue.type=BatchCQ``) as the broker writes and reads it (issue 35).

For 5.0.0 (the first release with the kind) and 5.5.1 (the newest the oracle builds) the harness writes
one store per module: a BatchCQ topic with inner batches of several sizes over two queues, a plain topic
beside it, batch consume queue files of 10 units so that a queue spans files. The broker's view of it
(``batch_consume_queues``: the units of its files, get(q) for every queue offset, lookups by time) is the
judge.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.oracle

VERSIONS = ("5.0.0", "5.5.1")
UNITS_PER_FILE = 10
CONFIG: dict[str, Any] = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 600,
    "mapperFileSizeBatchConsumeQueue": UNITS_PER_FILE * 46,
    "topic_attributes": {"BatchT": {"queue.type": "BatchCQ"}},
}
# (topic, queue, inner batch size or None for a plain message)
PLAN = [("BatchT", 0, n) for n in (3, 5, 1, 2, 7, 1, 4, 2, 6, 3, 2, 1)] + [
    ("BatchT", 1, 4),
    ("PlainT", 0, None),
    ("BatchT", 1, 1),
    ("PlainT", 0, None),
]


def scenario() -> dict[str, Any]:
    msgs = []
    for i, (topic, qid, n) in enumerate(PLAN):
        m: dict[str, Any] = {
            "topic": topic,
            "queue_id": qid,
            "tags": f"t{i % 3}",
            "keys": f"K{i}",
            "body_len": 20 + 7 * i,
            "body_seed": i,
            "born_timestamp": 1795302151971 + i,
        }
        if n is not None:
            m["inner_batch"] = n
        msgs.append(m)
    return {"config": CONFIG, "messages": msgs, "end": {"mode": "clean"}}


@pytest.fixture(scope="module", params=VERSIONS)
def written(request: pytest.FixtureRequest, oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(version, write result, store path, the broker's view) for one release."""
    v = request.param
    oracle.build(v)
    out = tmp_path_factory.mktemp(f"bcq-{v}")
    res = oracle.write(v, scenario(), out)
    view = oracle.view(v, out / "store", config=CONFIG)
    return v, res, out / "store", view


def test_oracle_writes_inner_batches_into_batch_consume_queues(written: Any) -> None:
    v, res, store, view = written
    assert all(m["put_status"] == "PUT_OK" for m in res["messages"]), v
    assert (store / "batchconsumequeue" / "BatchT" / "0").is_dir()
    assert not (store / "consumequeue" / "BatchT").exists()
    assert sorted(view["batch_consume_queues"]) == ["BatchT/0", "BatchT/1"]
    assert sorted(view["consume_queues"]) == ["PlainT/0"]
    # every inner batch is one unit: the record's offset and size, its first queue offset, its batch size
    for key, q in view["batch_consume_queues"].items():
        topic, qid = key.split("/")
        sent = [m for m in res["messages"] if m["topic"] == topic and m["queue_id"] == int(qid)]
        assert [(u["offset"], u["msg_base_offset"], u["batch_size"]) for u in q["units"]] == [
            (m["phys_offset"], m["queue_offset"], m["msg_num"]) for m in sent
        ]
        assert [u["size"] for u in q["units"]] == [m["wrote_bytes"] for m in sent]
        assert all(u["compacted_offset"] == -1 and u["reserved"] == 0 for u in q["units"])
        assert all(u["message"]["inner_base"] == str(u["msg_base_offset"]) for u in q["units"])
        assert all(u["message"]["inner_num"] == str(u["batch_size"]) for u in q["units"])
        assert all(u["message"]["sys_flag"] & 0x80 for u in q["units"])
        last = q["units"][-1]
        assert q["max_offset"] == last["msg_base_offset"] + last["batch_size"]
        assert q["min_offset"] == 0
        # get(q) answers the unit whose batch holds q
        for lk in q["lookups"]:
            o = lk["queue_offset"]
            holder = [u for u in q["units"] if u["msg_base_offset"] <= o < u["msg_base_offset"] + u["batch_size"]]
            if holder:
                assert lk["unit"] is not None and lk["unit"]["queue_offset"] == holder[0]["msg_base_offset"], (
                    v,
                    key,
                    o,
                )
            else:
                assert lk["unit"] is None, (v, key, o)
    # BatchT/0 spans two files of 10 units
    files = {u["file"] for u in view["batch_consume_queues"]["BatchT/0"]["units"]}
    assert files == {f"{0:020d}", f"{UNITS_PER_FILE * 46:020d}"}
