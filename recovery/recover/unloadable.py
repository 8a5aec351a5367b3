"""The store recover refuses before planning anything: a commitlog the broker refuses to
load (a leaf of the planner, so that applying checks it without importing the planner,
which imports applying for a dry run's dispatch)."""

from __future__ import annotations

from ...formats.errors import RecoveryError
from ..broker import mapped_file_queue_load
from ..findingcodes import FindingCode
from ..store import LayoutIssue, Store
from ..versions import BrokerProfile
from .model import RecoveryPlan
from .planstate import rel_path

__all__ = ["refuse_repair_at_unknown_cq_size", "refuse_unknown_cq_size", "refuse_unloadable", "refused_commitlog_file"]


def refused_commitlog_file(store: Store, profile: BrokerProfile) -> LayoutIssue | None:
    """The first commitlog file whose length makes the broker refuse to load the store, or
    None. MappedFileQueue.load takes only files of mappedFileSizeCommitLog bytes: one cut
    short (a middle file cut to 30000 bytes), extended (a sparse 64 GiB file) or empty
    fails the load, and the broker changes nothing (4.9.4 and 5.x alike: the oracle); 5.1.3
    and later delete an empty last file and load the rest. recover then refuses the store
    too (issue 33 R11: it cut at the short file, removed every later file with its intact
    messages, and the broker still refused the result); repair is the way out."""
    # (a file whose name does not tile the offsets stops recover anyway: status 4, nothing
    # changed, the problem naming it; see _layout_problems)
    untiled = {i.path for i in store.issues if i.code in (FindingCode.FILE_OVERLAP, "MISALIGNED_FILE")}
    files = [f for f in store.commitlog if rel_path(store, f.path) not in untiled]
    f = mapped_file_queue_load(files, store.geometry.commitlog_file_size, profile)
    if f is None:
        return None
    rel = rel_path(store, f.path)
    return next((i for i in store.issues if i.path == rel and i.code in ("WRONG_FILE_SIZE", "ZERO_LENGTH_FILE")), None)


def refuse_unloadable(store: Store, profile: BrokerProfile) -> None:
    """Raise :class:`RecoveryError` (status 8, nothing changed) for a store whose commitlog
    the broker refuses to load (:func:`refused_commitlog_file`), naming the file and repair."""
    issue = refused_commitlog_file(store, profile)
    if issue is not None:
        raise RecoveryError(
            f"{issue.message.split(' (')[0]}: the broker refuses to load this store and changes nothing, "
            "and so does recover (rmqtool repair mends the file and keeps the intact messages)",
            store.root / issue.path,
        )


def refuse_unknown_cq_size(store: Store, plan: RecoveryPlan) -> None:
    """Raise :class:`RecoveryError` (status 8, nothing changed) where the plan's recovery
    dispatch would write consume queues of a size nothing in the store or the options gives
    (``RecoveryContext.cq_size_refusal``, planning._refuse_unknown_cq_size)."""
    why = plan.context.cq_size_refusal if plan.context is not None else None
    if why is not None:
        raise RecoveryError(why, store.root / "consumequeue")


def refuse_repair_at_unknown_cq_size(store: Store, profile: BrokerProfile) -> None:
    """Raise :class:`RecoveryError` (status 8, before planning: nothing changed) where no
    consume queue file tells mappedFileSizeConsumeQueue, no option gives it, the commitlog
    holds data and the broker's start does not rebuild queues (5.x: it reputs from the
    commitlog's max offset, unless recheckReputOffsetFromCq). There repair can neither write
    the queues (a guessed size is a size the broker refuses to load) nor leave them to the
    broker's start, as it does for 4.x (the oracle: a 5.1.4 broker opening such a store
    after a clean shutdown has no unit; issue 33)."""
    if store.geometry.cq_file_size_known or profile.startup_reput_from_cq:
        return
    if not any(f.size > 0 for f in store.commitlog):
        return
    raise RecoveryError(
        "no consume queue file tells their size (mappedFileSizeConsumeQueue) and no option gave it: repair "
        f"cannot write the queues at the broker's size, and a {profile.label} broker's start does not rebuild "
        "them; give --cq-file-size or --broker-config"
        + (
            " (or start the broker on the store as it is: its abnormal recovery writes them)"
            if store.abort_present
            else ""
        ),
        store.root / "consumequeue",
    )
