"""``rmqtool timers STORE [--topic T] [--state S] [--at TIME]``: every timer and delay message
of a stopped broker's store with its real topic and queue, its delivery time and its state at
TIME (default now), read-only.

The work is in ``recovery.timers`` (the broker's next start at TIME played on the timer store
and the schedule queues); this module parses options and renders. Exit status: 0 the
messages listed, 4 a listed message is lost or will be delivered twice, 1 nothing matched,
2 a bad --at/--state, 8 a timer file the broker cannot load (one line naming it).
"""

from __future__ import annotations

from typing import Any

import click

from ...formats.errors import StoreLayoutError
from ...recovery import timers as rt
from ...recovery import timerstore as ts
from ..brokeropts import recovery_walk_options, timer_setting_options
from ..cmdopts import store_command_options
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import make_profile, open_store
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns, say
from ..progress import progress_bar, progress_option, quiet, quiet_flag
from ..render import emit, render, summary_record
from ..times import iso, parse_time

COLUMNS = [
    ("state", "STATE"),
    ("deliver_time", "DELIVER AT (UTC)"),
    ("kind", "KIND"),
    ("topic", "TOPIC"),
    ("queue_id", "QID"),
    ("uniq_key", "UNIQ_KEY"),
    ("rolled", "ROLLED"),
    ("note", "NOTE"),
]


FIELDS = COLUMNS + [
    ("kind", "KIND"),
    ("queue_id", "QID"),
    ("deliver_timestamp", "DELIVER AT (MS)"),
    ("store_timestamp", "STORED (MS)"),
    ("store_time", "STORED (UTC)"),
    ("physical_offset", "OFFSET"),
    ("delivered_twice", "DELIVERED TWICE"),
    ("lost_reason", "LOST BECAUSE"),
    ("delay_level", "LEVEL"),
    ("cancels", "CANCELS"),
]


def _row(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out["deliver_time"] = iso(r.get("deliver_timestamp"))
    out["store_time"] = iso(r.get("store_timestamp"))
    return out


def _note(r: dict[str, Any]) -> str | None:
    bits = []
    if r.get("lost_reason"):
        bits.append(r["lost_reason"])
    if r.get("delivered_twice"):
        bits.append("the broker's next start delivers it again")
    if r.get("cancels"):
        bits.append(f"cancels {r['cancels']}")
    if r.get("delay_level"):
        bits.append(f"level {r['delay_level']}")
    return "; ".join(bits) or None


def timer_store_summary(rep: rt.TimersReport) -> dict[str, Any]:
    """What the broker's next start at --at makes of the timer store (JSON ``timer_store``)."""
    out = rep.timer
    rc = out.recovered
    d: dict[str, Any] = {"present": out.present}
    if rc is not None:
        cp = out.files.checkpoint if out.files is not None else None
        d.update(
            {
                "read_time_timestamp": rc.curr_read_time,
                "read_time": iso(rc.curr_read_time),
                "checkpoint_read_timestamp": rc.checkpoint_read_time,
                "wheel_floor_timestamp": rc.wheel_floor,
                "slots_skipped": out.skipped_slots,
                "queue_offset": rc.curr_queue_offset,
                "enqueue_from": out.enqueue_from,
                "timer_log_end": rc.process_offset,
                "timer_log_files_dropped": [str(f.path.name) for f in rc.dropped_files],
                "checkpoint": cp._asdict() if cp is not None else None,
                "looping_slots": out.looping_slots,
            }
        )
    return d


@click.command("timers", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options(
    "read", recovery_walk_options, timer_setting_options, output_file_options, progress_option, quiet_flag
)
@click.option(
    "--topic", "-t", "topics", multiple=True, metavar="TOPIC", help="Only messages for this real topic (repeatable)."
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(rt.STATES),
    help="Only messages in this state at --at (repeatable): pending, due, delivered, cancelled, lost.",
)
@click.option(
    "--at",
    "at_text",
    default=None,
    metavar="TIME",
    help="The time the states are computed at, as the broker's next start then would see them (default: now): ISO "
    "8601 (UTC unless an offset is given), epoch s or ms (by magnitude), or relative (+2h, -1d).",
)
# before the one output rule, timers printed JSON lines into a pipe (RMQTOOL_FORMAT=jsonl)
@format_options("jsonl", columns="the messages")
def command(
    broker_version: str,
    topics: tuple[str, ...],
    states: tuple[str, ...],
    at_text: str | None,
    fmt: str,
    columns: tuple[str, ...] | None,
    **store_opts: Any,
) -> int:
    """Every timer message (5.x: TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, waiting in
    rmq_sys_wheel_timer, the timer log and the wheel) and every delay-level message
    (SCHEDULE_TOPIC_XXXX and config/delayOffset.json) of a stopped broker's STORE, with its
    real topic and queue, its delivery time and one state at --at: pending (due after it),
    due (due by then, not delivered: the broker's next start delivers it), delivered, cancelled
    or lost (nothing will deliver it). The states are those of the broker's next start at
    --at: its timer store recovery reads the wall clock and skips the slots older than the
    wheel spans.

    Exit status: 0 messages listed, 4 a listed message is lost or will be delivered twice,
    1 nothing matched, 2 usage error (a bad --at or --state), 8 a timer file the broker
    cannot load (one line naming the file and offset), 130 interrupted."""
    now = ts.wall_clock_ms()
    at = parse_time(at_text, "--at", now) if at_text is not None else now
    assert at is not None
    if at_text is None and not quiet():
        click.echo(f"rmqtool: timers at {iso(at)} (now; --at changes it)", err=True)
    shown = pick_columns(columns, COLUMNS, FIELDS)
    profile = make_profile(broker_version)
    store = open_store(**store_opts)
    tfiles = ts.open_timer_files(store, profile)
    if tfiles.fatal:
        p = tfiles.fatal[0]
        raise StoreLayoutError(p.message, store.root / p.path, p.offset)
    end_offset = _recovered_end(store, profile)
    total = sum(f.size for f in store.commitlog)
    with progress_bar(total, "timers") as advance:
        rep = rt.timers_report(store, profile, at, end_offset=end_offset, progress=advance, tfiles=tfiles)
    rows = [
        _row(r) for r in rep.rows if (not topics or r.get("topic") in topics) and (not states or r["state"] in states)
    ]
    for r in rows:
        r["note"] = _note(r)
    counts = rep.counts()
    nxt = rep.next_due()
    if not rows:
        code = int(Exit.REPAIRED)  # nothing matched: 1, grep's convention (as dump)
    elif any(r["state"] == "lost" or r.get("delivered_twice") for r in rows):
        code = int(Exit.PROBLEMS)
    else:
        code = int(Exit.OK)
    verdict = _verdict(rows, at)
    figures = {
        "store": str(store.root),
        "broker_version": profile.label,
        "at_timestamp": at,
        "at": iso(at),
        "counts": counts,
        "listed": len(rows),
        "next_due_timestamp": nxt,
        "next_due": iso(nxt),
    }
    with closed_stdout_ignored():
        emit(
            fmt,
            records=({"type": "message", **r} for r in rows),
            columns=shown,
            kind="message",
            summary=lambda: summary_record("timers", verdict, code, **figures),
            table=lambda: _table(store.root, at, rows, shown, counts, nxt, verdict),
            document=lambda: {
                "schema_version": SCHEMA_VERSION,
                **figures,
                "timer_store": timer_store_summary(rep),
                "messages": rows,
            },
        )
    if not rows:
        click.echo("rmqtool: timers: no timer or delay message matched", err=True)
    return code


def _verdict(rows: list[dict[str, Any]], at: int) -> str:
    """The listed messages in one sentence."""
    if not rows:
        return f"no timer or delay message matched at {iso(at)}"
    lost = sum(1 for r in rows if r["state"] == "lost")
    twice = sum(1 for r in rows if r.get("delivered_twice"))
    head = f"{len(rows)} timer/delay message(s) at {iso(at)}"
    bad = [f"{lost} lost"] if lost else []
    bad += [f"{twice} delivered twice by the broker's next start"] if twice else []
    return head + (": " + ", ".join(bad) if bad else "")


def _table(
    root: Any,
    at: int,
    rows: list[dict[str, Any]],
    shown: list[tuple[str, str]],
    counts: dict[str, int],
    nxt: int | None,
    verdict: str,
) -> None:
    if not rows:
        return  # (nothing matched: said on stderr, as dump commitlog's misses)
    render(iter(rows), "table", shown, title=f"rmqtool timers {root} at {iso(at)}")
    say(", ".join(f"{n} {s}" for s, n in counts.items()) + (f"; next due {iso(nxt)}" if nxt else ""))
    say(verdict)


def _recovered_end(store: Any, profile: Any) -> int | None:
    """Where the broker's recovery ends the commitlog (what its next start can read)."""
    from ...recovery.recover.planning import recovered_end

    return recovered_end(store, profile)


__all__ = ["command"]
