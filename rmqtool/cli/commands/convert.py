"""``rmqtool convert STORE --to classic OUT``: a DLedger (or mixed) store written anew as a
classic store (issue 37). The work is ``recovery.convert`` (plan, then write into
OUT.partial and rename); this module checks the options, refuses a store a live broker
holds, prints the plan and the result (the report for people unless --format json) and
maps the outcome to the shared exit codes: 0 converted (or the dry run's plan), 8 refused
(not a DLedger store, OUT not empty, not enough space, a message a classic broker would
stop at, a live broker), 2 usage. The source is never written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..cmdopts import store_command_options
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import check_lock, make_profile, open_store
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns
from ..progress import progress_bar, progress_option
from ..render import emit, summary_record


@click.command("convert", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options("read", output_file_options, progress_option)
@click.option(
    "--to",
    "target",
    type=click.Choice(("classic",)),
    required=True,
    help="The layout to write: classic (a commitlog without DLedger; the reverse is out of scope).",
)
@click.argument("out", type=click.Path(path_type=Path), metavar="OUT")
@click.option("--dry-run", is_flag=True, help="Print what would be written; write nothing.")
@click.option(
    "--include-uncommitted",
    is_flag=True,
    help="Convert the entries past the DLedger checkpoint's committedIndex too (up to where DLedger's recovery "
    "ends the ledger); without it they are left out and listed.",
)
@click.option(
    "--mapping",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Where the offset and msg id mapping goes (JSON lines; default OUT.mapping.jsonl beside OUT).",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; the plan and result are still printed."
)
@format_options(aliases={"text": "table"}, columns="the entries left out (index, entry_offset, topic, ...)")
def command(
    broker_version: str,
    target: str,
    out: Path,
    dry_run: bool,
    include_uncommitted: bool,
    mapping: Path | None,
    quiet: bool,
    fmt: str = "table",
    columns: tuple[str, ...] | None = None,
    **store_opts: Any,
) -> int:
    """Write a classic store OUT holding every committed message of the DLedger (or mixed)
    STORE in order, with the same queue offsets (consumer offsets stay valid) and consume
    queues, index, checkpoint and config; physical offsets and msg ids change (the mapping
    says how). STORE is never written."""
    from ...recovery.convert import convert, plan_convert

    store = open_store(**store_opts)
    check_lock(store.root, dry_run)
    profile = make_profile(broker_version)
    # (a store or target convert refuses: recovery.convert.ConvertError, one line, exit 8)
    plan = plan_convert(store, profile, out, include_uncommitted=include_uncommitted, mapping=mapping)
    with closed_stdout_ignored():
        if fmt == "table":
            _print_plan(plan, dry_run)
    result = None
    if not dry_run:
        total = plan.bytes + sum(f.size for f in store.commitlog if f.base < plan.divided_offset)
        with progress_bar(total, "convert", quiet) as tick:
            result = convert(store, profile, plan, progress=tick)
    with closed_stdout_ignored():
        if fmt == "table":
            if result is not None:
                click.echo(
                    f"done: {result['messages']} messages in {result['commitlog_files']} new commitlog files, "
                    f"{result['consume_queue_files']} consume queue files, {result['index_files']} index files: "
                    f"{plan.out}"
                )
                click.echo(f"mapping: {plan.mapping}")
        else:
            _machine(plan, result, dry_run, fmt, columns)
    return Exit.OK


LEFT_OUT_COLUMNS = [
    ("index", "INDEX"),
    ("entry_offset", "ENTRY OFFSET"),
    ("message_offset", "MESSAGE OFFSET"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("queue_offset", "QUEUE OFFSET"),
]


def _machine(plan: Any, result: dict[str, Any] | None, dry_run: bool, fmt: str, columns: Any) -> None:
    """The machine formats of the one output rule: json, the document (plan, result);
    jsonl and csv, the entries left out (past committedIndex), then the summary."""
    if dry_run:
        verdict = f"dry run: {plan.messages} messages would be converted to {plan.out}; nothing was written"
    else:
        assert result is not None
        verdict = f"converted: {result['messages']} messages to {plan.out}; mapping {plan.mapping}"
    records = [
        {
            "type": "left_out",
            "index": x.index,
            "entry_offset": x.entry_offset,
            "message_offset": x.message_offset,
            "topic": x.topic,
            "queue_id": x.queue_id,
            "queue_offset": x.queue_offset,
        }
        for x in plan.left_out
    ]
    emit(
        fmt,
        records=records,
        columns=pick_columns(columns, LEFT_OUT_COLUMNS, LEFT_OUT_COLUMNS + [("type", "TYPE")]),
        kind="left_out",
        summary=lambda: summary_record(
            "convert",
            verdict,
            int(Exit.OK),
            dry_run=dry_run,
            out=plan.out,
            mapping=plan.mapping,
            messages=plan.messages if result is None else result["messages"],
            left_out=len(plan.left_out),
        ),
        table=lambda: None,
        document=lambda: {
            "schema_version": SCHEMA_VERSION,
            "dry_run": dry_run,
            "plan": plan.to_dict(),
            "result": result,
        },
    )


def _print_plan(plan: Any, dry_run: bool) -> None:
    head = "dry run: " if dry_run else ""
    click.echo(f"{head}convert {plan.source} -> {plan.out} (classic, broker {plan.broker_version})")
    if plan.classic_files:
        click.echo(
            f"  classic files kept as they are (a mixed store): {len(plan.classic_files)}, "
            f"up to the divided offset {plan.divided_offset}"
        )
    click.echo(
        f"  DLedger messages: {plan.messages} ({plan.bytes} bytes) into about {plan.commitlog_files} commitlog files "
        f"from offset {plan.divided_offset}; committedIndex {plan.committed_index}, ledger end index {plan.ledger_end_index}"
    )
    for x in plan.left_out[:20]:
        click.echo(
            f"  left out (past committedIndex): entry {x.index} at {x.entry_offset}: {x.topic}/{x.queue_id} "
            f"queue offset {x.queue_offset}"
        )
    if len(plan.left_out) > 20:
        click.echo(f"  left out: {len(plan.left_out) - 20} more")
    click.echo(
        f"  space: about {plan.estimate_bytes} bytes"
        + (f", {plan.free_bytes} free" if plan.free_bytes is not None else "")
    )
    for n in plan.notes:
        click.echo(f"note: {n}")
    click.echo("note: the reverse (a classic store to DLedger) is out of scope")
