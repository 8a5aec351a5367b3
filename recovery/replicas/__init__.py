"""Replicas (issue 38): the stores of a master and its slaves compared offline, classic HA
and 5.x controller mode.

* :mod:`.compare`: where two commitlogs first differ (hashes of aligned ranges, then a
  binary search);
* :mod:`.sides`: one replica's extent (first and last offset) as the broker sees it;
* :mod:`.pairs`: a pair compared: relation (identical, prefix, diverged, disjoint), the
  first divergence with both sides' records, the messages only on each side, consume
  queues, index files, config files;
* :mod:`.epochs`: the broker's epoch cache and handshake (``EpochFileCache``,
  ``AutoSwitchHAClient.doTruncate``, ``changeToMaster``);
* :mod:`.controller`: each replica taken as the new master, what every cut loses;
* :mod:`.read`: the only place it reads records (the reading functions of ``recovery``).

Nothing here writes; ``recovery.replicas.truncate`` plans the truncation ``recover
--to-consistent-point`` applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .controller import epoch_summary, failover, has_epoch_file, load_replica
from .pairs import compare_pair
from .sides import Side, open_side

Progress = Callable[[int], None]

# a pair's relations that are problems (exit 4): the replicas diverge
DIVERGING = ("diverged", "disjoint")


def diff_replicas(sides: list[Side], *, limit: int = 20, progress: Progress | None = None) -> dict[str, Any]:
    """Every pair of ``sides`` compared; with an epoch file in any of them, the controller
    mode's failover outlook for each replica as the new master."""
    pairs = [
        compare_pair(sides[i], sides[j], limit=limit, progress=progress)
        for i in range(len(sides))
        for j in range(i + 1, len(sides))
    ]
    out: dict[str, Any] = {
        "replicas": [
            {
                "store": s.label,
                "broker_version": s.profile.label,
                "first_offset": s.first,
                "end_offset": s.end,
                "end": s.end_why,
                "commitlog_files": len(s.maps.files),
            }
            for s in sides
        ],
        "pairs": pairs,
        "controller": None,
    }
    if any(has_epoch_file(s) for s in sides):
        reps = [load_replica(s) for s in sides]
        for row, r in zip(out["replicas"], reps, strict=True):
            row["epochs"] = epoch_summary(r)
        out["controller"] = {"failover": failover(reps, limit=limit)}
    out["diverged"] = sum(1 for p in pairs if p["relation"] in DIVERGING)
    return out


__all__ = ["DIVERGING", "Side", "diff_replicas", "open_side"]
