"""The page of ``rmqtool report``: one self-contained HTML file (its style, script and data
inline; nothing fetched, no address of anything elsewhere), readable without its script
(the verdicts, answers, plans and tables are HTML) and with it (page.js draws the charts
from the embedded document and marks the page ``data-rendered="ok"``)."""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from ... import __version__

# first thing in <head>: every error of the page's script (and console.error) recorded on
# <html data-errors>, where a headless browser's dump of the page shows it
ERROR_HOOK = """(function () {
  var errs = [];
  function note(m) { errs.push(String(m)); document.documentElement.setAttribute("data-errors", errs.join(" | ")); }
  window.__rmqErrors = errs;
  window.__rmqNote = note;
  window.addEventListener("error", function (e) { note(e.message || "error"); });
  var ce = console.error;
  console.error = function () { note(Array.prototype.slice.call(arguments).join(" ")); if (ce) ce.apply(console, arguments); };
})();"""


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def e(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _num(n: Any) -> str:
    return "-" if n is None else f"{n:,}" if isinstance(n, int) else e(n)


def _msgs(n: Any) -> str:
    return "-" if n is None else f"{_num(n)} message" + ("" if n == 1 else "s")


def _embedded(doc: dict[str, Any]) -> str:
    """The document as JSON inside <script>: no "<" at all (so no "</script>" or "<!--")."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def _level(code: int) -> str:
    return "ok" if code == 0 else "bad" if code & 8 else "warn"


def render_page(doc: dict[str, Any]) -> str:
    stores = doc["stores"]
    title = "rmqtool incident report: " + ", ".join(s["store"] for s in stores)
    parts = [
        "<!doctype html>",
        '<html lang="en" data-rendered="pending">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<script>{ERROR_HOOK}</script>",
        f"<style>{_asset('page.css')}</style>",
        "</head>",
        "<body>",
        '<header class="top">',
        "<h1>rmqtool incident report</h1>",
        f'<div class="meta">generated {e(doc["generated_time"])} by rmqtool {e(__version__)}; '
        f"{len(stores)} store(s); read-only: nothing in the stores was changed</div>",
    ]
    if len(stores) > 1:  # (one store: its own verdict below says it)
        parts.append(
            f'<div class="verdict {_level(doc["exit_status"])}"><span class="status">exit status '
            f"{doc['exit_status']}</span>{e(doc['verdict'])}</div>"
        )
        parts.append(
            '<nav class="stores">'
            + "".join(f'<a href="#store-{i}">{e(s["store"])}</a>' for i, s in enumerate(stores))
            + "</nav>"
        )
    parts.append("</header>")
    parts.append("<main>")
    for i, s in enumerate(stores):
        parts.append(_store(i, s))
    parts.append("</main>")
    parts.append(f'<script type="application/json" id="rmq-data">{_embedded(doc)}</script>')
    parts.append(f"<script>{_asset('page.js')}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _store(i: int, s: dict[str, Any]) -> str:
    out = [
        f'<section class="store" id="store-{i}">',
        f'<h2>{e(s["store"])} <span class="more">(broker {e(s["broker_version"])})</span></h2>',
        f'<div class="verdict {_level(s["exit_status"])}"><span class="status">exit status {s["exit_status"]}</span>'
        f"{e(s['verdict'])}</div>",
    ]
    if s.get("refused"):
        out.append(_findings(s))
        out.append("</section>")
        return "\n".join(out)
    out.append(_answers(s))
    out.append("<h3>What recovery and repair would do</h3>")
    out.append(_plans(s))
    out.append("<h3>Timeline: the commitlog files and the messages per topic</h3>")
    out.append(
        f'<div class="chart" id="timeline-{i}"></div><div class="legend" id="timeline-{i}-legend"></div>'
        '<p class="note">From the consume queues: each message they point at, by its store time (bars stacked per '
        "topic; tick a topic to show it); the top lane: when the messages of each commitlog file were stored. Hover "
        "for numbers.</p>"
    )
    out.append("<h3>Where the damage lies</h3>")
    out.append(
        f'<div class="chart" id="damage-{i}"></div>'
        '<p class="note">The commitlog by offset: the files, the findings that name an offset, what the next start '
        "cuts (and what the abnormal recovery after a crash would cut), the regions repair fills with filler "
        "records, and the messages not yet in the consume queues.</p>"
    )
    out.append(_regions(s))
    out.append("<h3>Consume queues and consumer lag</h3>")
    out.append(_queues(s))
    out.append(f'<div class="chart" id="lag-{i}"></div>')
    out.append(_groups(s))
    out.append("<h3>Findings and their next steps</h3>")
    out.append(_findings(s))
    out.append("<h3>Topics</h3>")
    out.append(_topics(s))
    out.append("</section>")
    return "\n".join(out)


def _yes(v: Any, yes: str = "yes", no: str = "no", unknown: str = "unknown") -> str:
    if v is True:
        return f'<span class="yes">{e(yes)}</span>'
    if v is False:
        return f'<span class="no">{e(no)}</span>'
    return f'<span class="unknown">{e(unknown)}</span>'


def _answers(s: dict[str, Any]) -> str:
    a = s["answers"]
    nxt = "rmqtool " + " ".join(a["next"]) if a["next"] else None
    lose = (
        _msgs(a["would_lose"])
        + (f" ({_num(a['intact_at_risk'])} of them intact: rmqtool repair keeps them)" if a["intact_at_risk"] else "")
        if a["would_lose"] is not None
        else "-"
    )
    behind = ", ".join(a["consumers_behind"]) if a["consumers_behind"] else "none"
    rows = [
        ("safe to start the broker", _yes(a["safe_to_start"], unknown="unknown (the recovery walk tells)")),
        ("the next start would lose", e(lose)),
        ("not yet in the consume queues", e(f"{_msgs(a['undispatched'])} (the next start dispatches them)")),
        ("what to run next", f"<code>{e(nxt)}</code>" if nxt else "nothing"),
        ("consumers behind", e(behind)),
        ("the next start", e(a["outlook"])),
        ("verify", e(s["verify"]["verdict"]) + f" ({_num(s['verify']['messages'])} messages checked)"),
    ]
    if a["timers_waiting"] is not None:
        rows.append(("timer and delay messages waiting", _num(a["timers_waiting"])))
    return '<dl class="answers">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _plans(s: dict[str, Any]) -> str:
    rec, rep, look = s["recovery"], s["repair"], s["verify"]["outlook"] or {}
    rows = []
    if rec is not None:
        rows.append(
            (
                "recover (what the broker's next start does)",
                "nothing to do"
                if rec["nothing_to_do"]
                else f"{rec['mode']} recovery from {rec['start_file'] or '-'}: cuts {rec['bytes_cut']:,} bytes from offset "
                f"{rec['end_offset']:,}, {rec['messages_cut']:,} messages ({rec['intact_cut']:,} intact), changes "
                f"{rec['queues_changed']:,} consume queue(s)",
            )
        )
    ab = look.get("abnormal") if isinstance(look, dict) else None
    if ab and look.get("mode") != "abnormal":
        rows.append(
            (
                "after a crash (the abnormal recovery)",
                f"starts at {ab.get('start_file')}, stops at offset {_num(ab.get('stop_offset'))}, cuts "
                f"{_num(ab.get('records_cut'))} records",
            )
        )
    filled = sum(r["bytes"] for r in rep["regions"])
    rows.append(
        (
            "repair (keeps every intact message)",
            "nothing to mend"
            if not rep["regions"]
            else f"fills {len(rep['regions'])} damaged region(s), {filled:,} bytes, with filler records; quarantines "
            f"{rep['quarantined']:,} message(s); keeps all {rep['intact_records']:,} intact records"
            + (
                f" ({rep['recover_would_cut_intact']:,} of which recover would cut)"
                if rep["recover_would_cut_intact"]
                else ""
            ),
        )
    )
    body = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _regions(s: dict[str, Any]) -> str:
    regs = s["repair"]["regions"]
    if not regs:
        return '<p class="note">No damaged region: repair has nothing to fill.</p>'
    head = "<tr><th>file</th><th class=num>from</th><th class=num>to</th><th class=num>bytes</th><th>kind</th></tr>"
    body = "".join(
        f"<tr><td><code>{e(r['file'])}</code></td><td class=num>{r['from']:,}</td><td class=num>{r['to']:,}</td>"
        f"<td class=num>{r['bytes']:,}</td><td>{e(r['kind'])}</td></tr>"
        for r in regs[:200]
    )
    more = f'<p class="more">{len(regs) - 200} more regions: rmqtool repair --dry-run</p>' if len(regs) > 200 else ""
    return f'<table class="sortable"><thead>{head}</thead><tbody>{body}</tbody></table>{more}'


def _queues(s: dict[str, Any]) -> str:
    cl, a, co = s["commitlog"], s["answers"], s["consumer_offsets"]
    return (
        f"<p>The consume queues end at commitlog offset {_num(cl['max_phy_offset_of_cq'])} of "
        f"{_num(cl['end_offset'])} bytes of commitlog files; not in them yet: {_msgs(a['undispatched'])}. "
        f"Consumers: {_num(co['groups'])} group(s), {_num(co['offsets'])} committed offsets, {_num(co['lag'])} messages "
        f"not consumed; {_num(co['ahead'])} offsets ahead of their queue's end, {_num(co['behind'])} behind its "
        "start.</p>"
    )


def _groups(s: dict[str, Any]) -> str:
    gs = s["consumer_groups"]
    if not gs:
        return ""
    head = (
        "<tr><th>group</th><th class=num>topics</th><th class=num>offsets</th><th class=num>lag</th>"
        "<th class=num>ahead</th><th class=num>behind</th><th>status</th><th>oldest unconsumed</th></tr>"
    )
    body = "".join(
        f"<tr><td>{e(g['group'] if g['group'] is not None else '(schedule progress)')}</td>"
        f"<td class=num>{g['topics']:,}</td><td class=num>{g['offsets']:,}</td><td class=num>{g['lag']:,}</td>"
        f"<td class=num>{g['ahead']:,}</td><td class=num>{g['behind']:,}</td><td>{e(g['status'])}</td>"
        f"<td class=nowrap>{e(g['oldest_unconsumed_time'] or '-')}</td></tr>"
        for g in gs
    )
    more = (
        f'<p class="more">{s["consumer_groups_total"] - len(gs)} more groups: rmqtool offsets</p>'
        if s["consumer_groups_total"] > len(gs)
        else ""
    )
    return f'<table class="sortable"><thead>{head}</thead><tbody>{body}</tbody></table>{more}'


def _findings(s: dict[str, Any]) -> str:
    fs = s["findings"]
    if not fs:
        return '<p class="note">No finding: verify found nothing to report.</p>'
    head = "<tr><th>severity</th><th>code</th><th>where</th><th>what</th><th>next step</th></tr>"
    rows = []
    for f in fs:
        where = f.get("file") or ""
        if f.get("pos") is not None:
            where += f"@{f['pos']}"
        step = f.get("next") or ""
        cmd = f.get("next_command")
        nxt = e(step)
        if cmd:
            line = "rmqtool " + " ".join(cmd)
            rest = step[len(line) :].lstrip(",:; ") if step.startswith(line) else step
            nxt = f"<code>{e(line)}</code>" + (f"<br>{e(rest)}" if rest else "")
        rows.append(
            f'<tr><td class="sev-{e(f["severity"])}">{e(f["severity"])}</td><td><code>{e(f["code"])}</code></td>'
            f"<td><code>{e(where)}</code></td><td>{e(f['message'])}</td><td>{nxt}</td></tr>"
        )
    more = (
        f'<p class="more">{s["findings_total"] - len(fs)} more findings: rmqtool verify {e(s["store"])}</p>'
        if s["findings_total"] > len(fs)
        else ""
    )
    body = "".join(rows)
    return f'<table class="sortable findings"><thead>{head}</thead><tbody>{body}</tbody></table>{more}'


def _topics(s: dict[str, Any]) -> str:
    ts = s["topics"]
    if not ts:
        return '<p class="note">No consume queue.</p>'
    head = (
        "<tr><th>topic</th><th class=num>queues</th><th class=num>messages</th><th class=num>unresolved units</th>"
        "<th>first stored</th><th>last stored</th></tr>"
    )
    body = "".join(
        f"<tr><td>{e(t['topic'])}</td><td class=num>{t['queues']:,}</td><td class=num>{t['messages']:,}</td>"
        f"<td class=num>{t['unresolved']:,}</td><td class=nowrap>{e(t['first_store_time'] or '-')}</td>"
        f"<td class=nowrap>{e(t['last_store_time'] or '-')}</td></tr>"
        for t in ts
    )
    more = (
        f'<p class="more">{s["topics_total"] - len(ts)} more topics: rmqtool info --format json</p>'
        if s["topics_total"] > len(ts)
        else ""
    )
    return f'<table class="sortable"><thead>{head}</thead><tbody>{body}</tbody></table>{more}'


__all__ = ["render_page"]
