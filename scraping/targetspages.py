"""The pages people open at /prometheus/ in scale-out mode (scraping.targetsview).

Debian 12's victoria-metrics (1.79) ships no web UI (Debian 13's 1.112 has vmui, which
MAC neither proxies nor links yet), so the targets view serves the pages that
Prometheus's own UI would (the navigation bar and `mac start master` link them):
the fleet's targets merged from every scraper, the rules and alerts of the rule
evaluator, and an index that says where the rest is. Plain HTML in MAC's look (its
stylesheet, from the front door's /static/), with relative links so that the pages
work under /prometheus/ and on the loopback's 29090 alike. No Django: the targets view
runs without it.
"""

from __future__ import annotations

from collections import Counter
from html import escape

# The dashboard's stylesheet, as the front door serves it (macweb.settings.STATIC_URL).
STYLESHEET = "/static/dashboard/css/mac.css"
# A page lists at most this many targets; the JSON (api/v1/targets) has every one.
TARGETS_SHOWN = 1000
_NAV = (("./", "Metrics"), ("targets", "Targets"), ("rules", "Rules"), ("alerts", "Alerts"))


def _page(title: str, body: str) -> bytes:
    links = "".join(f'<a href="{href}">{escape(name)}</a>' for href, name in _NAV)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{escape(title)} · MAC metrics</title>
<link rel="stylesheet" href="{STYLESHEET}">
</head><body>
<header class="topbar">
<a class="brand" href="/"><span class="brand-mark" aria-hidden="true"></span>MAC</a>
<nav class="nav">{links}<a href="/alerts/">Alertmanager's alerts</a></nav></header>
<main class="page"><h1>{escape(title)}</h1>
{body}
</main></body></html>
""".encode()


def _table(head: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    ths = "".join(f"<th>{escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        f'<div class="table-scroll"><table><thead><tr>{ths}</tr></thead>'
        f"<tbody>{trs}</tbody></table></div>"
    )


def _badge(state: str) -> str:
    good = state in ("up", "ok", "inactive")
    kind = "online" if good else "offline" if state in ("down", "err", "firing") else "unknown"
    return f'<span class="badge badge-{kind}">{escape(state or "-")}</span>'


def _labels(labels: dict) -> str:
    return " ".join(
        f'<span class="chip">{escape(k)}="{escape(str(v))}"</span>'
        for k, v in sorted(labels.items())
        if not k.startswith("__")
    )


def index_page(scrapers: int) -> bytes:
    body = f"""<section class="panel">
<p>Scale-out mode: {scrapers} scraper(s) (vmagent) write to one store (VictoriaMetrics);
rules are evaluated by vmalert. This is where Prometheus's pages would be.</p>
<ul>
<li><a href="targets">Targets</a>: what every scraper scrapes, merged, with each
target's health.</li>
<li><a href="rules">Rules</a> and <a href="alerts">alerts</a> of the rule evaluator.</li>
<li>Queries: the Prometheus HTTP API under this address
(<a href="api/v1/query?query=up">api/v1/query</a>, <code>api/v1/query_range</code>...).
Point Grafana's Prometheus data source here, with an API token
(<code>Authorization: Bearer &lt;token&gt;</code>).</li>
<li>Each node's charts: its page on the <a href="/">dashboard</a>.</li>
</ul></section>"""
    return _page("Metrics", body)


def targets_page(merged: dict, job: str = "", state: str = "") -> bytes:
    """The merged /api/v1/targets answer as a page; `job` and `state` filter the list."""
    data = merged["data"]
    scrapers = [
        [escape(s["scraper"]), escape(s["url"]), _badge(s["health"]),
         escape(str(s.get("activeTargets", ""))), escape(s.get("lastError", ""))]
        for s in data["scrapers"]
    ]  # fmt: skip
    active = data["activeTargets"]
    jobs: dict[str, Counter] = {}
    for target in active:
        jobs.setdefault(target["labels"].get("job", ""), Counter())[target.get("health")] += 1
    summary = [
        [f'<a href="?job={escape(name)}">{escape(name)}</a>', str(count["up"]),
         str(sum(count.values()) - count["up"]), str(sum(count.values()))]
        for name, count in sorted(jobs.items())
    ]  # fmt: skip
    chosen = [
        t
        for t in active
        if (not job or t["labels"].get("job") == job) and (not state or t.get("health") == state)
    ]
    # Those not up first: they are what someone opens this page for.
    chosen.sort(key=lambda t: (t.get("health") == "up", t["labels"].get("job", ""), t["scrapeUrl"]))
    rows = [
        [escape(t["scrapeUrl"]), _badge(t.get("health", "")), _labels(t["labels"]),
         escape(t.get("scraper", "")), escape(t.get("lastScrape", "")),
         escape(t.get("lastError", ""))]
        for t in chosen[:TARGETS_SHOWN]
    ]  # fmt: skip
    shown = f"{len(rows)} of {len(chosen)}" if len(chosen) > len(rows) else str(len(rows))
    what = " ".join(filter(None, [f"job {job}" if job else "", state]))
    body = (
        '<section class="panel"><h2>Scrapers</h2>'
        + _table(["scraper", "URL", "health", "targets", "error"], scrapers, "No scrapers.")
        + '</section><section class="panel"><h2>Jobs</h2>'
        + _table(["job", "up", "not up", "targets"], summary, "No targets yet.")
        + f'</section><section class="panel"><div class="table-head"><h2>Targets {escape(what)}'
        f'</h2><span class="muted">{shown} · <a href="?state=down">down only</a> · '
        f'<a href="targets">all</a> · <a href="api/v1/targets">JSON</a></span></div>'
        + _table(
            ["endpoint", "state", "labels", "scraper", "last scrape", "error"],
            rows,
            "No target matches.",
        )
        + "</section>"
    )
    return _page("Targets", body)


def rules_page(answer: dict | None, error: str = "") -> bytes:
    if answer is None:
        return _page("Rules", f'<p class="alert" role="alert">{escape(error)}</p>')
    sections = []
    for group in answer.get("data", {}).get("groups") or []:
        rows = [
            [escape(rule.get("name", "")), escape(rule.get("type", "")),
             f"<code>{escape(rule.get('query', ''))}</code>",
             _badge(rule.get("state") or rule.get("health", "")), _badge(rule.get("health", "")),
             escape(rule.get("lastError", ""))]
            for rule in group.get("rules") or []
        ]  # fmt: skip
        sections.append(
            f'<section class="panel"><h2>{escape(group.get("name", ""))}</h2>'
            + _table(["rule", "type", "expression", "state", "health", "error"], rows, "No rules.")
            + "</section>"
        )
    return _page("Rules", "".join(sections) or '<p class="muted">No rule groups loaded.</p>')


def alerts_page(answer: dict | None, error: str = "") -> bytes:
    if answer is None:
        return _page("Alerts", f'<p class="alert" role="alert">{escape(error)}</p>')
    alerts = answer.get("data", {}).get("alerts") or []
    rows = [
        [escape(a.get("labels", {}).get("alertname") or a.get("name", "")),
         _badge(a.get("state", "")), _labels(a.get("labels", {})),
         escape(a.get("annotations", {}).get("summary", "")),
         escape(a.get("activeAt", "")), escape(str(a.get("value", "")))]
        for a in alerts
    ]  # fmt: skip
    body = (
        '<section class="panel"><p class="muted">Alerts of the rules as the rule evaluator '
        "sees them; what reaches people, and the silences, are on the "
        '<a href="/alerts/">dashboard\'s Alerts page</a>.</p>'
        + _table(
            ["alert", "state", "labels", "summary", "active since", "value"],
            rows,
            "No alert is pending or firing.",
        )
        + "</section>"
    )
    return _page("Alerts", body)
