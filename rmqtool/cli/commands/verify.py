"""``rmqtool verify STORE``: offline, read-only integrity check of a whole store.

The checks live in ``recovery.verify``; this module parses options, runs them with a
progress bar on stderr, renders the report (a summary on a terminal, one JSON report
object, or one finding per JSON line) and maps it to the shared exit codes: 0 sound
(warnings allowed), 4 problems found (with --strict: warnings too), 8 operational error.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from ...recovery import records
from ...recovery.verify import VerifyReport, verify_store
from ..brokeropts import recovery_walk_options, refusal_findings
from ..cmdopts import store_command_options
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..nextsteps import next_step
from ..options import make_profile, open_store, resolve_format
from ..output import SCHEMA_VERSION, output_file_options
from ..output import console as _console
from ..progress import progress_bar, progress_option
from ..render import dumps, render

FORMATS = ("table", "json", "jsonl")
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
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="table: summary for people (default on a terminal); json: one report object; jsonl: one finding per line (default when piped).",
)
@click.option("--strict", is_flag=True, help="Exit 4 on warnings too.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def command(broker_version: str, jobs: int, fmt: str | None, strict: bool, quiet: bool, **store_opts: Any) -> int:
    """Check a stopped broker's store without writing to it: file layout, every commitlog
    record (CRC on), consume queues, index, checkpoint, lock and abort.

    Exit status: 0 sound (warnings allowed), 4 problems found (--strict: warnings too),
    8 operational error, 2 usage error, 130 interrupted."""
    profile = make_profile(broker_version)
    refused = refusal_findings()
    if refused:  # a layout or setting rmqtool does not handle: say so, check nothing
        fmt = fmt or ("table" if _stdout_is_regular_file() else resolve_format(fmt, FORMATS))
        with closed_stdout_ignored():
            write_refusals(refused, fmt, store_opts["store"])
        return int(Exit.OPERATIONAL)
    store = open_store(**store_opts)
    fmt = fmt or ("table" if _stdout_is_regular_file() else resolve_format(fmt, FORMATS))  # table on a terminal
    # or into a file (verify STORE > report.txt), jsonl into a pipe
    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with progress_bar(total, "verify", quiet) as advance:
        report = verify_store(store, profile, jobs=jobs, progress=advance)
    with closed_stdout_ignored():
        write_report(report, fmt)
    return int(Exit.PROBLEMS if report.problems(strict) else Exit.OK)


def write_refusals(findings: list[dict[str, Any]], fmt: str, root: str | Path, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        out.write(
            dumps(
                {
                    "schema_version": SCHEMA_VERSION,
                    "store": str(root),
                    "refused": True,
                    "errors": len(findings),
                    "findings": findings,
                }
            )
            + "\n"
        )
    elif fmt == "jsonl":
        for f in findings:
            out.write(dumps(f) + "\n")
    else:
        render(findings, "table", FINDING_COLUMNS, title=f"rmqtool verify {root}: refused", out=out)


def _stdout_is_regular_file() -> bool:
    try:
        return stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def write_report(report: VerifyReport, fmt: str, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        doc = report.to_dict()
        for f in doc["findings"]:
            f["next"] = next_step(f, report.store)
        doc["schema_version"] = SCHEMA_VERSION
        doc["verdict"] = _verdict(report)
        out.write(dumps(doc) + "\n")
    elif fmt == "jsonl":
        for f in report.findings:
            d = f.to_dict()
            d["next"] = next_step(d, report.store)
            out.write(dumps(d) + "\n")
    else:
        _summary(report, out)


def _verdict(report: VerifyReport) -> str:
    if report.errors:
        return f"problems: {report.errors} error finding(s), {report.warnings} warning(s)"
    if report.warnings:
        return f"sound, with {report.warnings} warning(s)"
    return "sound"


def _summary(report: VerifyReport, out: TextIO) -> None:
    console = _console(out)
    rec = report.summary.get("recovery") or {}
    lines = [f"verdict: {_verdict(report)} ({report.summary.get('messages', 0)} messages)"]
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
        if rec.get("abnormal", {}).get("index_files_deleted"):
            lines.append(
                f"abnormal recovery deletes index files {', '.join(rec['abnormal']['index_files_deleted'])} and re-indexes"
            )
    steps: dict[str, str] = {}
    for f in sorted(report.findings, key=lambda f: f.severity != "error"):
        d = f.to_dict()
        steps.setdefault(next_step(d, report.store), d["code"])
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
            (f.to_dict() for f in shown),
            "table",
            FINDING_COLUMNS,
            title=f"findings ({len(report.findings)}; first {len(shown)} shown)"
            if len(report.findings) > len(shown)
            else "findings",
            out=out,
        )


__all__ = ["command", "write_report"]
