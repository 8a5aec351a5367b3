"""Stores of the record shapes the speed of every command must not depend on (issue 22):
many topics with names of 1 to 127 characters, 0 to 32 keys, bodies from 0 B to 4 MiB,
IPv6 born and store hosts, the shape of ``gen_commitlog.py`` (the benchmark store that
exposed a fall-back to the slow path), property values that are not ASCII, 5.x V2 records
with long topics, 5.x inner batches and 5.2+ property CRCs. Stores are written with or
without consume queues (the walks' hints).

Every record is built through :func:`formats.commitlog.build_message` (the schema), so
these stores are for tests and for benchmarks of moderate size; the writer follows the
broker's file rules as ``recovery.synth`` does (a message of length L only if L + 8 bytes
are left, else a BLANK record; the last file zero-padded).
"""

from __future__ import annotations

import math
import mmap
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..formats.checkpoint import Checkpoint, encode_checkpoint
from ..formats.commitlog import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, build_blank, build_message
from ..formats.javahash import tags_code
from ..formats.names import offset_to_file_name
from ..formats.properties import serialize_properties
from .versions import BrokerProfile
from .walks import broker_steps

_CQ_UNIT = struct.Struct(">qiq")

Fields = dict[str, Any]


def _v4(rng: random.Random) -> dict[str, Any]:
    return {"address": bytes([10, 0, rng.randrange(10), rng.randrange(1, 255)]), "port": rng.randrange(30000, 65000)}


def _v6(rng: random.Random) -> dict[str, Any]:
    return {"address": rng.randbytes(16), "port": rng.randrange(30000, 65000)}


_STORE_V4: dict[str, Any] = {"address": bytes([192, 168, 0, 10]), "port": 10911}
_WORDS = ["order", "payment", "user", "inventory", "shipment", "audit", "billing", "notify", "risk", "cart"]


class Shape:
    """One shape: the broker version whose records it has, and message ``n``'s
    (topic, queue id, fields without offsets, tags)."""

    def __init__(
        self,
        name: str,
        version: str,
        make: Callable[[random.Random, int], tuple[str, int, Fields, str | None]],
        v2: Callable[[str], bool] | None = None,
        append_crc32: bool = False,
    ) -> None:
        self.name = name
        self.version = version
        self.make = make
        self.v2 = v2 or (lambda topic: False)
        self.append_crc32 = append_crc32

    @property
    def profile(self) -> BrokerProfile:
        return BrokerProfile.for_version(self.version)


def _base(
    rng: random.Random,
    n: int,
    topic: str,
    qid: int,
    body: bytes,
    props: dict[str, str],
    version: str,
    born: dict[str, Any] | None = None,
    store: dict[str, Any] | None = None,
    reconsume: int = 0,
) -> Fields:
    born = born or _v4(rng)
    store = store or _STORE_V4
    sys_flag = (BORNHOST_V6_FLAG if len(born["address"]) == 16 else 0) | (
        STOREHOSTADDRESS_V6_FLAG if len(store["address"]) == 16 else 0
    )
    ts = 1_795_000_000_000 + n
    trailing = BrokerProfile.for_version(version).properties_trailing_separator
    return {
        "queue_id": qid,
        "flag": 0,
        "sys_flag": sys_flag,
        "born_timestamp": ts - 3,
        "born_host": born,
        "store_timestamp": ts,
        "store_host": store,
        "reconsume_times": reconsume,
        "prepared_transaction_offset": 0,
        "body": body,
        "topic": topic,
        "properties": serialize_properties(props, trailing),
    }


def _uniq(rng: random.Random, n: int) -> str:
    return "0A0003%02X7A6918B4AAC2%08X%04X" % (rng.randrange(256), n * 7 & 0xFFFFFFFF, n & 0xFFFF)


def _gen_commitlog(v6_fraction: float) -> Callable[[random.Random, int], tuple[str, int, Fields, str | None]]:
    """The shape of /work/shared/bench/gen_commitlog.py: 24 topics of 8-30 characters and
    a hot single-queue topic, a retry topic with RETRY_TOPIC/REAL_TOPIC, 0-2 keys, WAIT,
    sometimes traceId, log-normal bodies of 64 B-4 KiB (text or binary), IPv6 born hosts."""
    state: dict[str, Any] = {}

    def make(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
        if not state:
            r2 = random.Random(7)
            topics: list[tuple[str, int]] = []
            while len(topics) < 24:
                t = "-".join([r2.choice(_WORDS), r2.choice(_WORDS), r2.choice(["prod", "cn-east", "v2", "cdc"])])[:30]
                if len(t) >= 8 and t not in [x[0] for x in topics]:
                    topics.append((t, r2.choice([4, 8, 16])))
            state["topics"] = topics
        r = rng.random()
        reconsume = 0
        if r < 0.36:
            topic, qid = "order-events-prod-fifo", 0
        elif r < 0.37:
            topic, qid = "%RETRY%order-consumer", 0
            reconsume = rng.randint(1, 16)
        else:
            topic, nq = rng.choice(state["topics"])
            qid = rng.randrange(nq)
        blen = int(min(4096, max(64, rng.lognormvariate(math.log(780), 0.75))))
        body = (
            rng.randbytes(blen) if rng.random() < 0.3 else bytes(rng.choice(b'abcdefgh {}:,"0123') for _ in range(blen))
        )
        tag = rng.choice(["TagA", "TagB", "order_paid"])
        props: dict[str, str] = {}
        if rng.random() < 0.7:
            props["KEYS"] = "ORD-%d" % rng.randrange(10**9) + (
                " USR-%d" % rng.randrange(10**6) if rng.random() < 0.2 else ""
            )
        props["TAGS"] = tag
        props["UNIQ_KEY"] = _uniq(rng, n)
        props["WAIT"] = "true" if rng.random() < 0.9 else "false"
        if reconsume:
            props["RETRY_TOPIC"] = "order-events-prod-fifo"
            props["REAL_TOPIC"] = topic
        if rng.random() < 0.1:
            props["traceId"] = "%016x" % rng.getrandbits(64)
        born = _v6(rng) if rng.random() < v6_fraction else None
        return topic, qid, _base(rng, n, topic, qid, body, props, "4.9.4", born=born, reconsume=reconsume), tag

    return make


def _many_topics(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    k = n % 300
    length = 1 + (k * 37) % 127  # 1..127 characters (a V1 TOPICLENGTH is one signed byte)
    topic = (f"t{k}-" + "abcdefghij_%|" * 10)[:length]
    props = {"TAGS": "T", "UNIQ_KEY": _uniq(rng, n)}
    return topic, n % 4, _base(rng, n, topic, n % 4, rng.randbytes(rng.randrange(0, 300)), props, "4.9.4"), "T"


def _keys(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    nk = n % 33  # 0..32 keys
    props: dict[str, str] = {}
    if nk:
        props["KEYS"] = " ".join(f"k{n}-{i}" for i in range(nk))
    props["UNIQ_KEY"] = _uniq(rng, n)
    if n % 5:
        props["TAGS"] = f"tag{n % 7}"
    return "KeysTopic", n % 2, _base(rng, n, "KeysTopic", n % 2, rng.randbytes(100), props, "4.9.4"), props.get("TAGS")


_BODY_SIZES = [0, 1, 2, 63, 64, 1000, 4096, 65535, 65536, 1 << 20, 4 << 20]


def _bodies(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    size = _BODY_SIZES[n % len(_BODY_SIZES)] if n < 2 * len(_BODY_SIZES) else rng.randrange(0, 2000)
    props = {"TAGS": "B", "KEYS": f"b{n}"}
    return "BodyTopic", 0, _base(rng, n, "BodyTopic", 0, rng.randbytes(size), props, "4.9.4"), "B"


def _ipv6(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    born = _v6(rng) if n & 1 else _v4(rng)
    store = {"address": bytes(15) + b"\x01", "port": 10911} if n & 2 else _STORE_V4
    props = {"TAGS": "H", "KEYS": f"h{n}", "UNIQ_KEY": _uniq(rng, n)}
    return (
        "HostTopic",
        n % 3,
        _base(rng, n, "HostTopic", n % 3, rng.randbytes(rng.randrange(0, 500)), props, "4.9.4", born=born, store=store),
        "H",
    )


def _non_ascii(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    vals = ["café", "订单-已支付", "🙂🙃", "Ωμέγα", "ключ", "x\u00a0y"]
    tag = vals[n % len(vals)]
    props = {
        "KEYS": f"{vals[(n + 1) % len(vals)]} k{n}",
        "TAGS": tag,
        "UNIQ_KEY": _uniq(rng, n),
        "note": vals[(n + 2) % len(vals)] * 3,
    }
    return (
        "UnicodeTopic",
        n % 2,
        _base(rng, n, "UnicodeTopic", n % 2, ("ü" * rng.randrange(0, 200)).encode(), props, "4.9.4"),
        tag,
    )


def _v2_long_topics(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    # 10 to 199 bytes (a queue directory's name: at most 255)
    topic = ("LongTopic-" + "x" * 300)[: 10 + (n * 53) % 190] if n % 3 else f"Short{n % 5}"
    props = {"TAGS": "V", "KEYS": f"v{n}", "UNIQ_KEY": _uniq(rng, n)}
    born = _v6(rng) if n % 4 == 1 else None
    return topic, 0, _base(rng, n, topic, 0, rng.randbytes(rng.randrange(0, 400)), props, "5.3.3", born=born), "V"


def _inner_batch(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    props = {"TAGS": "I", "UNIQ_KEY": _uniq(rng, n)}
    if n % 4:
        props["INNER_NUM"] = str(1 + n % 32)
        props["INNER_BASE"] = str(n * 32)
    return "BatchTopic", 0, _base(rng, n, "BatchTopic", 0, rng.randbytes(rng.randrange(10, 2000)), props, "5.3.3"), "I"


def _prop_crc(rng: random.Random, n: int) -> tuple[str, int, Fields, str | None]:
    props = {"TAGS": "C", "KEYS": f"c{n}", "UNIQ_KEY": _uniq(rng, n)}
    return (
        "CrcTopic",
        n % 2,
        _base(rng, n, "CrcTopic", n % 2, rng.randbytes(rng.randrange(0, 300)), props, "5.3.3"),
        "C",
    )


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("gen_commitlog", "4.9.4", _gen_commitlog(0.05)),
        Shape("many_topics", "4.9.4", _many_topics),
        Shape("keys_0_32", "4.9.4", _keys),
        Shape("bodies_0_4mib", "4.9.4", _bodies),
        Shape("ipv6_hosts", "4.9.4", _ipv6),
        Shape("non_ascii_properties", "4.9.4", _non_ascii),
        Shape("v2_long_topics_5x", "5.3.3", _v2_long_topics, v2=lambda t: len(t.encode()) > 127),
        Shape("inner_batch_5x", "5.3.3", _inner_batch),
        Shape("prop_crc_5x", "5.3.3", _prop_crc, append_crc32=True),
    )
}


def records(shape: Shape, count: int, seed: int = 0) -> Iterator[tuple[str, int, bytes, str | None]]:
    """(topic, queue id, record bytes without offsets patched, tags) of ``count`` messages."""
    rng = random.Random(seed)
    for n in range(count):
        topic, qid, f, tags = shape.make(rng, n)
        yield topic, qid, f, tags  # type: ignore[misc]


def write_shape_store(
    root: Path,
    shape: Shape,
    count: int,
    *,
    file_size: int = 16 << 20,
    cq: bool = True,
    cq_file_size: int = 6_000_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Write ``count`` messages of ``shape`` into ``root`` (commitlog/, with ``cq`` the
    consume queues, and a clean-shutdown checkpoint). Returns a summary."""
    root = Path(root)
    (root / "commitlog").mkdir(parents=True, exist_ok=True)
    queue_offset: dict[tuple[str, int], int] = {}
    units: dict[tuple[str, int], list[bytes]] = {}
    base = 0
    data = bytearray()
    last_ts = 0
    files = 0

    def flush(final: bool) -> None:
        nonlocal base, data, files
        if not final:
            data += build_blank(file_size - len(data))
        data += bytes(file_size - len(data))
        (root / "commitlog" / offset_to_file_name(base)).write_bytes(bytes(data))
        files += 1
        base += file_size
        data = bytearray()

    rng = random.Random(seed)
    for n in range(count):
        topic, qid, f, tags = shape.make(rng, n)
        qo = queue_offset.get((topic, qid), 0)
        for _ in range(2):
            f["queue_offset"] = qo
            f["physical_offset"] = base + len(data)
            raw = build_message(f, v2=shape.v2(topic), append_crc32=shape.append_crc32)
            if len(raw) + 8 > file_size:
                raise ValueError(f"a record of {len(raw)} bytes does not fit a {file_size}-byte file")
            if len(raw) + 8 <= file_size - len(data):
                break
            flush(False)
        data += raw
        queue_offset[(topic, qid)] = qo + 1
        units.setdefault((topic, qid), []).append(_CQ_UNIT.pack(f["physical_offset"], len(raw), tags_code(tags)))
        last_ts = f["store_timestamp"]
    flush(True)
    if cq:
        per = cq_file_size // _CQ_UNIT.size
        for (topic, qid), us in units.items():
            d = root / "consumequeue" / topic / str(qid)
            d.mkdir(parents=True, exist_ok=True)
            for i in range(0, len(us), per):
                blob = b"".join(us[i : i + per])
                (d / offset_to_file_name(i * _CQ_UNIT.size)).write_bytes(blob + bytes(cq_file_size - len(blob)))
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(last_ts, last_ts, 0, 0, 0)))
    return {"messages": count, "files": files, "queues": len(units)}


def write_consume_queues(root: Path, profile: BrokerProfile, cq_file_size: int = 6_000_000) -> int:
    """Consume queues for a store that has none (e.g. ``recovery.synth``'s), from the
    broker's walk of its commitlog (``check_record``), so that walks have their hints.
    Returns the number of units written."""
    units: dict[tuple[str, int], list[bytes]] = {}
    for p in sorted((Path(root) / "commitlog").iterdir()):
        base = int(p.name)
        with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for step in broker_steps(buf, len(buf), profile, check_crc=False):
                c = step.checked
                if not c.is_message or c.rec is None:
                    break
                units.setdefault((c.rec.topic, c.rec.queue_id), []).append(
                    _CQ_UNIT.pack(base + step.pos, c.size, c.tags_code)
                )
    per = cq_file_size // _CQ_UNIT.size
    for (topic, qid), us in units.items():
        d = Path(root) / "consumequeue" / topic / str(qid)
        d.mkdir(parents=True, exist_ok=True)
        for i in range(0, len(us), per):
            blob = b"".join(us[i : i + per])
            (d / offset_to_file_name(i * _CQ_UNIT.size)).write_bytes(blob + bytes(cq_file_size - len(blob)))
    return sum(len(u) for u in units.values())
