"""The intact records of a store, as the repair tests compare them before and after a
change (tests/test_repair.py, tests/oracle/test_repair_versions_oracle.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rmqtool.recovery import check as ck
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import DAMAGED, scan_commitlog, to_queue
from rmqtool.recovery.versions import BrokerProfile


def intact_records(root: Path, profile: BrokerProfile) -> list[dict[str, Any]]:
    """Every record verify does not mark damaged: offset, size, sha256 of its bytes, topic,
    queue id and offset, whether it goes to a queue, its index keys, its transaction type."""
    store = Store.open(root)
    _scans, recs = scan_commitlog(store, profile)
    out = []
    for j in range(len(recs)):
        if recs.flags[j] & DAMAGED:
            continue
        off = int(recs.off[j])
        f = store.commitlog_file_for(off)
        assert f is not None
        with store.map(f) as mf:
            c = ck.check_record(mf.buf, off - f.base, mf.size, profile)
            raw = bytes(mf.buf[off - f.base : off - f.base + int(recs.size[j])])
        assert c.rec is not None
        keys = [k for k in (c.keys or "").split(" ") if k] + ([c.uniq_key] if c.uniq_key else [])
        out.append(
            {
                "off": off,
                "size": int(recs.size[j]),
                "sha": hashlib.sha256(raw).hexdigest(),
                "topic": c.rec.topic,
                "qid": c.rec.queue_id,
                "qoff": c.rec.queue_offset,
                "queued": bool(to_queue(recs.flags[j : j + 1])[0]),
                "keys": keys,
                "tx": c.rec.sys_flag & 0xC,
            }
        )
    return out
