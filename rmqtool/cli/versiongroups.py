"""A dry run without a release (issue 34, pain 8): where ``--broker-version auto`` leaves
candidate releases that recover the store differently, ``recover``, ``repair`` and
``rebuild-index --dry-run`` answer "what would the broker do?" with one plan per group of
candidates instead of refusing: the command runs once per group (as the group's release,
``Inference.assumed`` of the group), and groups whose plans come out the same on this store
(the same output but for the release's name, the same exit status) are merged into one, so
that each plan shown is labelled with every release that makes exactly it.

For people: a line naming the candidates and the evidence, then each plan under a heading
naming its releases, then one line per group with its verdict. In a machine format (the one
output rule): json is one document whose ``release_groups`` hold each group's own document;
jsonl is each group's records (with ``releases``), a ``release_group`` record carrying the
group's summary record, and one summary record last; csv the same rows with a ``releases``
column. The exit status is the union (bitwise or) of the groups' statuses.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from .output import SCHEMA_VERSION, color_mode, fixed_width, redirected, resolve, say, width
from .render import dumps, summary_hook

if TYPE_CHECKING:
    from ..recovery.identify import Inference

Version = tuple[int, int, int]


@dataclass
class Group:
    """Releases that make the same plan of this store, the release it was made as, and
    what the command printed (``text``), returned and summed up."""

    versions: list[Version]
    label: str
    code: int = 0
    text: str = ""
    summary: dict[str, Any] | None = None
    key: str = field(default="", repr=False)

    @property
    def releases(self) -> str:
        return spans(self.versions)


def spans(versions: list[Version]) -> str:
    """ "4.7.1-4.9.8, 5.0.0": runs of consecutive supported releases."""
    from ..recovery.versions import RELEASES, version_label

    order = {v: i for i, v in enumerate(RELEASES)}
    runs: list[list[Version]] = []
    for v in sorted(versions, key=lambda v: order.get(v, -1)):
        if runs and order.get(runs[-1][-1], -2) + 1 == order.get(v, -3):
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(
        version_label(r[0]) if len(r) == 1 else f"{version_label(r[0])}-{version_label(r[-1])}" for r in runs
    )


def run_per_group(
    command: str,
    inf: Inference,
    call: Callable[[dict[str, Any]], int],
    kw: dict[str, Any],
    quiet: bool,
) -> int:
    """Run ``call`` (the command with these keyword arguments) once per group of ``inf``'s
    candidates, merge the groups that plan alike, print them as the format asks; the union
    of their exit statuses."""
    from ..recovery.identify import Inference
    from ..recovery.versions import DEFAULT_VERSION, version_label

    fmt = resolve(kw.get("fmt"), None, {"text": "table"})
    out_path = kw.pop("output_file", None)
    color = kw.pop("color", "auto")
    groups: list[Group] = []
    with color_mode(color), redirected(out_path), _once_on_stderr():
        w = width()
        for members in inf.groups:
            label = version_label(Inference(members).assumed())
            g = Group(list(members), label)
            buf = io.StringIO()
            seen: list[dict[str, Any]] = []
            with contextlib.redirect_stdout(buf), fixed_width(w), summary_hook(seen.append):
                g.code = int(call({**kw, "broker_version": label, "output_file": None, "color": color}))
            g.text = buf.getvalue()
            g.summary = seen[-1] if seen else None
            g.key = f"{g.code}\n" + _unnamed(g.text, label)
            same = next((o for o in groups if o.key == g.key), None)
            if same is not None:
                same.versions += g.versions
                if label == DEFAULT_VERSION:  # (the plan shown is made as the default release where it can be)
                    same.label, same.text, same.summary = g.label, g.text, g.summary
            else:
                groups.append(g)
        code = 0
        for g in groups:
            code |= g.code
        if fmt == "json":
            _json(command, inf, groups, code)
        elif fmt == "jsonl":
            _jsonl(command, inf, groups, code)
        elif fmt == "csv":
            _csv(command, inf, groups, code)
        else:
            _table(command, inf, groups)
    if not quiet and fmt != "table":
        click.echo(f"rmqtool: note: {_headline(command, inf, groups)}", err=True)
    return code


class _Once:
    """Standard error with every line that starts with "rmqtool: " (a warning, a note)
    written once: each group's run says the same warnings about the store; progress and
    anything else pass through as they come."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.pending = ""
        self.seen: set[str] = set()

    def write(self, s: str) -> int:
        if not self.pending and not s.startswith(PREFIX):
            return int(self.inner.write(s))
        self.pending += s
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            if line not in self.seen:
                self.seen.add(line)
                self.inner.write(line + "\n")
        return len(s)

    def flush(self) -> None:
        if self.pending:
            self.inner.write(self.pending)
            self.pending = ""
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


PREFIX = "rmqtool: "


@contextlib.contextmanager
def _once_on_stderr() -> Iterator[None]:
    saved = sys.stderr
    once = _Once(saved)
    sys.stderr = once
    try:
        yield
    finally:
        once.flush()
        sys.stderr = saved


def _unnamed(text: str, label: str) -> str:
    """``text`` with the release it was made as unnamed where it stands alone (not inside
    a range such as 4.9.2-4.9.8 that a note names whatever the release)."""
    return re.sub(rf"(?<![\w.-]){re.escape(label)}(?![\w.-]|\.\d)", "<release>", text)


def _headline(command: str, inf: Inference, groups: list[Group]) -> str:
    if len(groups) == 1:
        return (
            f"--broker-version auto: the candidates {groups[0].releases} {_verb(command)} this store identically "
            f"({inf.describe_evidence()}); the plan below is theirs"
        )
    return (
        f"--broker-version auto: the candidates {_verb(command)} this store differently ({inf.describe_evidence()}): "
        f"one plan per group of releases that {_verb(command)} it identically, {len(groups)} plans; "
        "--broker-version RELEASE (the broker's lib/rocketmq-store-RELEASE.jar) shows one"
    )


def _verb(command: str) -> str:
    return {"recover": "recover", "repair": "repair", "rebuild-index": "rebuild"}.get(command, command)


def _verdict_of(g: Group) -> str:
    if g.summary is not None:
        # (the group's own verdict; its "--yes applies it" does not hold without a release)
        return str(g.summary["verdict"]).removesuffix("; --yes applies it")
    return f"the plan made as {g.label} above (exit status {g.code})"


def _verdict(groups: list[Group]) -> str:
    if len(groups) == 1:
        return f"{groups[0].releases}: {_verdict_of(groups[0])}"
    return "the candidate releases differ: " + "; ".join(f"{g.releases}: {_verdict_of(g)}" for g in groups)


def _table(command: str, inf: Inference, groups: list[Group]) -> None:
    say(_headline(command, inf, groups))
    for i, g in enumerate(groups, 1):
        say("")
        say(f"== plan {i} of {len(groups)}: releases {g.releases} (made as {g.label}) ==")
        click.echo(g.text, nl=False)
    say("")
    for g in groups:
        say(f"{g.releases}: {_verdict_of(g)}")
    if any(g.code for g in groups):
        say(
            f"to apply one: rmqtool {command} STORE --broker-version RELEASE (the broker's "
            "lib/rocketmq-store-RELEASE.jar names it)"
        )


def _json(command: str, inf: Inference, groups: list[Group], code: int) -> None:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "dry_run": True,
        "broker_version": "auto",
        "candidates": spans([v for g in groups for v in g.versions]),
        "evidence": list(inf.evidence),
        "release_groups": [
            {
                "releases": g.releases,
                "versions": [".".join(map(str, v)) for v in g.versions],
                "broker_version": g.label,
                "document": json.loads(g.text),
            }
            for g in groups
        ],
        "verdict": _verdict(groups),
        "exit_status": code,
    }
    click.echo(dumps(doc))


def _final_summary(command: str, groups: list[Group], code: int) -> dict[str, Any]:
    s: dict[str, Any] = {
        "type": "summary",
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "verdict": _verdict(groups),
        "exit_status": code,
        "dry_run": True,
        "applied": False,
        "broker_version": "auto",
        "release_groups": len(groups),
    }
    first = groups[0].summary or {}
    if "store" in first:
        s["store"] = first["store"]
    if all(g.summary is not None and "nothing_to_do" in g.summary for g in groups):
        s["nothing_to_do"] = all(bool(g.summary and g.summary["nothing_to_do"]) for g in groups)
    if command == "rebuild-index":
        s.pop("broker_version")
    return s


def _jsonl(command: str, inf: Inference, groups: list[Group], code: int) -> None:
    for g in groups:
        lines = [json.loads(x) for x in g.text.splitlines() if x.strip()]
        for r in lines[:-1]:
            click.echo(dumps({**r, "releases": g.releases}))
        click.echo(
            dumps(
                {
                    "type": "release_group",
                    "releases": g.releases,
                    "versions": [".".join(map(str, v)) for v in g.versions],
                    "broker_version": g.label,
                    "summary": lines[-1] if lines else None,
                }
            )
        )
    click.echo(dumps(_final_summary(command, groups, code)))


def _csv(command: str, inf: Inference, groups: list[Group], code: int) -> None:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    header: list[str] | None = None
    for g in groups:
        rows = list(csv.reader(io.StringIO(g.text)))
        if not rows:
            continue
        if header is None:
            header = ["record", "releases", *rows[0][1:]]
            w.writerow(header)
        for r in rows[1:]:
            kind = "release_group" if r and r[0] == "summary" else (r[0] if r else "")
            w.writerow([kind, g.releases, *r[1:]])
    if header is None:
        header = ["record", "releases", "verdict", "exit_status"]
        w.writerow(header)
    blank = [""] * (len(header) - 4)
    w.writerow(["summary", "", *blank, _verdict(groups), code])
    click.echo(out.getvalue(), nl=False)


__all__ = ["run_per_group", "spans"]
