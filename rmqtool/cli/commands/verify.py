"""``rmqtool verify STORE``: offline, read-only integrity check of a whole store.

The checks live in ``recovery.verify``; this module parses options, runs them with a
progress bar on stderr, renders the report (the verdict, outlook and findings for people;
one JSON report object; one finding per JSON line and a summary record; CSV) and maps it
to the shared exit codes: 0 sound (warnings allowed), 4 problems found (with --strict:
warnings too), 8 operational error.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from ...recovery import records
from ...recovery.verify import VerifyReport, verify_store
from ..brokeropts import recovery_walk_options, refusal_findings
from ..cmdopts import store_command_options
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..nextsteps import next_command, next_step
from ..options import make_profile, open_store
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns
from ..output import console as _console
from ..progress import progress_bar, progress_option
from ..render import emit, render, summary_record

FIRST_FINDINGS = 50

CHECK_COLUMNS = records.CHECK.table_columns()
FINDING_COLUMNS = records.FINDING.table_columns()


@click.command("verify", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options("verify", recovery_walk_options, output_file_options, progress_option)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Check commitlog files (and parts of big files) in N processes.",
)
@click.option("--strict", is_flag=True, help="Exit 4 on warnings too.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@format_options(lambda: "table" if _stdout_is_regular_file() else "jsonl", columns="the findings")
def command(
    broker_version: str,
    jobs: int,
    fmt: str,
    columns: tuple[str, ...] | None,
    strict: bool,
    quiet: bool,
    **store_opts: Any,
) -> int:
    """Check a stopped broker's store without writing to it: file layout, every commitlog
    record (CRC on), consume queues, index, checkpoint, lock and abort.

    Exit status: 0 sound (warnings allowed), 4 problems found (--strict: warnings too),
    8 operational error, 2 usage error, 130 interrupted."""
    profile = make_profile(broker_version)
    shown = pick_columns(columns, FINDING_COLUMNS, _finding_fields())
    refused = refusal_findings()
    if refused:  # a layout or setting rmqtool does not handle: say so, check nothing
        with closed_stdout_ignored():
            write_refusals(refused, fmt, store_opts["store"], columns=shown)
        return int(Exit.OPERATIONAL)
    store = open_store(**store_opts)
    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with progress_bar(total, "verify", quiet) as advance:
        report = verify_store(store, profile, jobs=jobs, progress=advance)
    code = int(Exit.PROBLEMS if report.problems(strict) else Exit.OK)
    with closed_stdout_ignored():
        write_report(report, fmt, columns=shown, exit_status=code)
    return code


def _finding_fields() -> list[tuple[str, str]]:
    """What --columns may name: every field of a finding."""
    return [(c.name, c.header or c.name.upper()) for c in records.FINDING.columns] + [
        ("next", "NEXT"),
        ("next_command", "NEXT COMMAND"),
        ("details", "DETAILS"),
    ]


def write_refusals(
    findings: list[dict[str, Any]],
    fmt: str,
    root: str | Path,
    out: TextIO | None = None,
    columns: list[tuple[str, str]] | None = None,
) -> None:
    out = out or sys.stdout
    verdict = f"refused: {len(findings)} finding(s) name what rmqtool does not handle; nothing was checked"
    emit(
        fmt,
        records=findings,
        columns=columns or FINDING_COLUMNS,
        kind="finding",
        summary=lambda: summary_record(
            "verify", verdict, Exit.OPERATIONAL, store=str(root), refused=True, errors=len(findings), warnings=0
        ),
        table=lambda: render(
            findings, "table", columns or FINDING_COLUMNS, title=f"rmqtool verify {root}: refused", out=out
        ),
        document=lambda: {
            "schema_version": SCHEMA_VERSION,
            "store": str(root),
            "refused": True,
            "errors": len(findings),
            "findings": findings,
        },
        out=out,
    )


def _stdout_is_regular_file() -> bool:
    try:
        return stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def write_report(
    report: VerifyReport,
    fmt: str,
    out: TextIO | None = None,
    columns: list[tuple[str, str]] | None = None,
    exit_status: int | None = None,
) -> None:
    out = out or sys.stdout
    code = int(exit_status if exit_status is not None else (Exit.PROBLEMS if report.problems(False) else Exit.OK))

    def document() -> dict[str, Any]:
        doc = report.to_dict()
        for f in doc["findings"]:
            with_next(f, report)
        doc["schema_version"] = SCHEMA_VERSION
        doc["verdict"] = verdict_of(report)
        doc["exit_status"] = code
        return doc

    emit(
        fmt,
        records=_findings(report),
        columns=columns or FINDING_COLUMNS,
        kind="finding",
        summary=lambda: _summary_record(report, code),
        table=lambda: _summary(report, out, columns or FINDING_COLUMNS),
        document=document,
        out=out,
    )


def _findings(report: VerifyReport) -> Iterator[dict[str, Any]]:
    for f in report.findings:
        yield with_next(f.to_dict(), report)


def with_next(d: dict[str, Any], report: VerifyReport) -> dict[str, Any]:
    """The finding with ``next`` (the step in words) and ``next_command`` (its argv after
    ``rmqtool``, or null), decided with the recovery outlook."""
    outlook = report.summary.get("recovery")
    d["next"] = next_step(d, report.store, outlook)
    d["next_command"] = next_command(d, report.store, outlook)
    return d


def _summary_record(report: VerifyReport, code: int) -> dict[str, Any]:
    rec = report.summary.get("recovery") or {}
    return summary_record(
        "verify",
        verdict_of(report),
        code,
        store=report.store,
        broker_version=report.broker_version,
        messages=report.summary.get("messages", 0),
        errors=report.errors,
        warnings=report.warnings,
        next_start=rec.get("mode"),
        broker_loads=rec.get("loads"),
    )


def verdict_of(report: VerifyReport) -> str:
    if report.errors:
        return f"problems: {report.errors} error finding(s), {report.warnings} warning(s)"
    if report.warnings:
        return f"sound, with {report.warnings} warning(s)"
    return "sound"


def _summary(report: VerifyReport, out: TextIO, columns: list[tuple[str, str]]) -> None:
    console = _console(out)
    rec = report.summary.get("recovery") or {}
    lines = [f"verdict: {verdict_of(report)} ({report.summary.get('messages', 0)} messages)"]
    if rec.get("normal"):
        lines.append(
            f"next start: {rec['mode']} recovery"
            + (
                ""
                if rec.get("loads")
                else f" - the broker refuses to load the store ({', '.join(rec.get('load_blockers', []))})"
            )
        )
        for key in ("normal", "abnormal"):
            o = rec[key]
            lines.append(
                f"{key} recovery: starts at {o['start_file']} ({o['rule']}), scans {o['bytes_scanned']} bytes, "
                f"stops at offset {o['stop_offset']}, cuts {o['records_cut']} records"
                + (f", deletes {len(o['files_deleted'])} file(s)" if o["files_deleted"] else "")
            )
            cond = o.get("if_force_verify_prop_crc")
            if cond:  # a setting the store does not show decides: both outcomes
                lines.append(
                    f"  that with forceVerifyPropCRC=false (as given); with forceVerifyPropCRC=true (the usual "
                    f"companion of enabledAppendPropCRC) it stops at offset {cond['stop_offset']} and cuts "
                    f"{cond['records_cut']} records"
                )
        if rec.get("abnormal", {}).get("index_files_deleted"):
            lines.append(
                f"abnormal recovery deletes index files {', '.join(rec['abnormal']['index_files_deleted'])} and re-indexes"
            )
    steps: dict[str, str] = {}
    for f in sorted(report.findings, key=lambda f: f.severity != "error"):
        d = f.to_dict()
        steps.setdefault(next_step(d, report.store, report.summary.get("recovery")), d["code"])
    for step, code in list(steps.items())[:8]:
        lines.append(f"next ({code}): {step}")
    for line in lines:
        console.print(line, highlight=False, markup=False)
    render(
        (c.to_dict() for c in report.checks),
        "table",
        CHECK_COLUMNS,
        title=f"rmqtool verify {report.store} (broker {report.broker_version})",
        out=out,
    )
    shown = sorted(report.findings, key=lambda f: f.severity != "error")[:FIRST_FINDINGS]  # errors first
    if shown:
        render(
            (with_next(f.to_dict(), report) for f in shown),
            "table",
            columns,
            title=f"findings ({len(report.findings)}; first {len(shown)} shown)"
            if len(report.findings) > len(shown)
            else "findings",
            out=out,
        )
    # the verdict again, last: the first lines have scrolled away above a long table
    console.print(lines[0], highlight=False, markup=False)


__all__ = ["command", "verdict_of", "with_next", "write_report"]
