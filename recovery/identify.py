"""Which RocketMQ release wrote a store (``--broker-version auto``): what the store shows,
which releases that leaves, and whether those releases recover it the same way.

The evidence is only what a release alone writes: files and directories that only 5.x
creates, fields only 5.x writes into config/*.json, V2 records (5.1.0+), the ``__CRC32#``
property (5.2.0+). What each candidate
then does is the profile of :mod:`recovery.versions` (``recovery_signature``): versions
are told apart only where their recovery differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..formats import commitlog as cl
from ..formats.config import read_config_bytes
from ..formats.errors import FormatError
from . import check as ck
from .store import Store
from .versions import DEFAULT_VERSION, RELEASES, BrokerProfile, parse_version, version_label

# files and directories (relative to the store root) that only 5.x brokers create
FIVE_X_FILES = ("timerwheel", "timerlog", "batchconsumequeue", "compaction", "epochFileCheckpoint", "brokerIdentity",
                "config/timercheck", "config/timermetrics", "config/consumerOrderInfo.json",
                "config/topicQueueMapping.json", "config/messageRequestMode.json")
RECORDS_PER_FILE = 4096  # records read at the start of each of the last files
# fields only 5.x writes into the broker's config files (TopicConfig.attributes,
# SubscriptionGroupConfig.groupRetryPolicy / consumeMessageOrderly: absent up to 4.9.8)
FIVE_X_CONFIG_FIELDS = (("config/topics.json", "attributes"), ("config/subscriptionGroup.json", "groupRetryPolicy"),
                        ("config/subscriptionGroup.json", "consumeMessageOrderly"))


@dataclass
class Inference:
    candidates: list[tuple[int, int, int]]
    evidence: list[str] = field(default_factory=list)

    @property
    def groups(self) -> list[list[tuple[int, int, int]]]:
        """The candidates, in runs of consecutive releases that recover the same way."""
        out: list[list[tuple[int, int, int]]] = []
        last = None
        for v in self.candidates:
            sig = BrokerProfile(v).recovery_signature()
            if out and sig == last:
                out[-1].append(v)
            else:
                out.append([v])
            last = sig
        return out

    @property
    def ambiguous(self) -> bool:
        return len({BrokerProfile(v).recovery_signature() for v in self.candidates}) > 1

    def assumed(self) -> tuple[int, int, int]:
        """The version a read-only command emulates: the default release when it is a
        candidate, else the newest candidate."""
        d = parse_version(DEFAULT_VERSION)
        return d if d in self.candidates else self.candidates[-1]

    def describe_candidates(self) -> str:
        return ", ".join(_span(g) for g in self.groups)

    def describe_evidence(self) -> str:
        return "; ".join(self.evidence) if self.evidence else "nothing in the store tells the releases apart"


def _span(g: list[tuple[int, int, int]]) -> str:
    return version_label(g[0]) if len(g) == 1 else f"{version_label(g[0])}-{version_label(g[-1])}"


def infer_version(store: Store) -> Inference:
    lo = RELEASES[0]
    evidence: list[str] = []
    for rel in FIVE_X_FILES:
        if (store.root / rel).exists():
            evidence.append(f"{rel} exists (only 5.x writes it)")
            lo = max(lo, (5, 0, 0))
            break
    if lo < (5, 0, 0):
        for rel, name in FIVE_X_CONFIG_FIELDS:
            try:
                raw = read_config_bytes(store.root / rel)  # (never a FIFO or device, bounded)
            except FormatError:
                continue
            if raw is None:
                continue
            text = raw.decode("utf-8", "replace")
            if re.search(rf'"{name}"\s*:', text):
                evidence.append(f"{rel} has the field {name} (only 5.x writes it)")
                lo = (5, 0, 0)
                break
    probe = BrokerProfile((5, 3, 1))  # reads V1 and V2 records, no 5.3.2 remaining checks
    seen_v2 = seen_crc = False
    for f in store.commitlog[-2:]:
        if f.size == 0:
            continue
        with store.map(f) as mf:
            end = min(mf.size, store.geometry.commitlog_file_size)
            pos = 0
            for _ in range(RECORDS_PER_FILE):
                c = ck.check_record(mf.buf, pos, end, probe, check_crc=False, read_body=False)
                if not c.is_message or c.rec is None:
                    break
                if not seen_v2 and cl.PREFIX.unpack_from(mf.buf, pos)[1] == cl.MAGIC_V2:
                    seen_v2 = True
                    evidence.append(f"a V2 record at offset {f.base + pos} (5.1.0+)")
                if not seen_crc and c.props is not None and "__CRC32#" in c.props:
                    seen_crc = True
                    evidence.append(f"a __CRC32# property in the record at offset {f.base + pos} (5.2.0+)")
                pos += c.size
    if seen_v2:
        lo = max(lo, (5, 1, 0))
    if seen_crc:
        lo = max(lo, (5, 2, 0))
    return Inference([v for v in RELEASES if v >= lo], evidence)
