"""The targets view on 29090 in scale-out mode: every scraper's targets in one answer.

The guide checks scraping with `curl -s http://localhost:29090/api/v1/targets`. With
several vmagent scrapers each knows only its own share, so this small server answers
that URL with the union of each scraper's own `/api/v1/targets` (vmagent serves
Prometheus's format), every target marked with the `scraper` that holds it
("0/2"), plus `data.scrapers`, one entry per scraper with its health. A scraper that
does not answer is listed there as down; its targets are missing from the union until
it is back, which is exactly the gap in their metrics.

`state` (active, dropped, any) and `scrapePool` (one job) narrow `/api/v1/targets` as
Prometheus's do, and are passed on to each scraper: the node page asks for one job's
targets when one of them is down (macweb.dashboard.scrapes).

`/api/v1/rules` and `/api/v1/alerts` come from the rule evaluator (vmalert, `--rules`),
as Prometheus answers them from its own rules. Any other GET or POST (queries,
`/api/v1/series`...) is passed to the store, so the port keeps answering PromQL as
Prometheus did. `/-/ready` and `/-/healthy` are this server's own, and so are the pages
people open where Prometheus's UI would be (`/`, `/graph`, `/targets`, `/rules`,
`/alerts`: scraping.targetspages). No Django: `python -m scraping.targetsview
--listen 127.0.0.1:29090 --store URL --rules URL --scraper URL...` (maccli.master.scaleout
starts it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scraping import targetspages

TIMEOUT = 5.0
PASSED_HEADERS = ("Content-Type", "Content-Encoding")


def fetch_targets(url: str, query: str = "") -> tuple[list[dict], list[dict], str]:
    """(active, dropped, error) of one scraper; error is "" when it answered."""
    target_url = f"{url}/api/v1/targets" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(target_url, timeout=TIMEOUT) as answer:  # noqa: S310
            data = json.load(answer)["data"]
    except (OSError, ValueError, KeyError) as exc:
        return [], [], str(getattr(exc, "reason", None) or exc)
    return data.get("activeTargets") or [], data.get("droppedTargets") or [], ""


def _wanted(target: dict, job: str) -> bool:
    """Whether a target belongs to `job` (its scrape pool; "" for every job)."""
    pool = target.get("scrapePool") or (target.get("labels") or {}).get("job")
    return not job or pool == job


def merged_targets(scrapers: list[str], query: str = "") -> dict:
    """The Prometheus /api/v1/targets answer for every scraper at once; `query` is the
    request's (state=, scrapePool=), applied here too, whatever each scraper makes of it."""
    asked = urllib.parse.parse_qs(query)
    state = (asked.get("state") or ["any"])[0]
    job = (asked.get("scrapePool") or [""])[0]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(scrapers)))) as threads:
        answers = list(threads.map(lambda url: fetch_targets(url, query), scrapers))
    active: list[dict] = []
    dropped: list[dict] = []
    status = []
    of = len(scrapers)
    for index, (url, (mine, gone, error)) in enumerate(zip(scrapers, answers, strict=True)):
        shard = f"{index}/{of}"
        mine = [target for target in mine if _wanted(target, job)] if state != "dropped" else []
        gone = [target for target in gone if _wanted(target, job)] if state != "active" else []
        for target in mine:
            target["scraper"] = shard
        active += mine
        dropped += gone
        entry = {"scraper": shard, "url": url, "health": "down" if error else "up"}
        entry.update({"lastError": error} if error else {"activeTargets": len(mine)})
        status.append(entry)
    return {
        "status": "success",
        "data": {"activeTargets": active, "droppedTargets": dropped, "scrapers": status},
    }


def fetch_json(url: str) -> tuple[dict | None, str]:
    """(the JSON answer of `url`, "") or (None, why it is unavailable)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:  # noqa: S310 (mac's URLs)
            return json.load(answer), ""
    except (OSError, ValueError) as exc:
        return None, f"{url} does not answer: {getattr(exc, 'reason', None) or exc}"


HTML = "text/html; charset=utf-8"


class Handler(BaseHTTPRequestHandler):
    server_version = "mac-targets-view"
    store = ""
    rules = ""
    scrapers: list[str] = []

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        if path in ("/-/ready", "/-/healthy"):
            self._send(200, b"ready\n", "text/plain")
        elif path == "/api/v1/targets":
            body = json.dumps(merged_targets(self.scrapers, query)).encode()
            self._send(200, body, "application/json")
        elif path in ("/api/v1/rules", "/api/v1/alerts") and self.rules:
            self._pass(self.rules)
        elif path in ("/", "/graph"):
            self._send(200, targetspages.index_page(len(self.scrapers)), HTML)
        elif path == "/targets":
            page = targetspages.targets_page(
                merged_targets(self.scrapers), params.get("job", ""), params.get("state", "")
            )
            self._send(200, page, HTML)
        elif path in ("/rules", "/alerts"):
            self._send(200, self._rules_page(path), HTML)
        else:
            self._pass(self.store)

    def do_POST(self) -> None:
        self._pass(self.store)

    def do_HEAD(self) -> None:
        """As GET without the body (the gate passes HEAD wherever it passes GET)."""
        self.do_GET()

    def _rules_page(self, path: str) -> bytes:
        if not self.rules:
            answer, why = None, "no rule evaluator is given to this view (--rules URL)"
        else:
            answer, why = fetch_json(f"{self.rules}/api/v1{path}")
        render = targetspages.rules_page if path == "/rules" else targetspages.alerts_page
        return render(answer, why)

    def _pass(self, base: str) -> None:
        """The request as it came, to `base` (the store); its answer as it comes back."""
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(  # noqa: S310 (the store's URL, from mac)
            base + self.path, data=body, method=self.command
        )
        if self.headers.get("Content-Type"):
            request.add_header("Content-Type", self.headers["Content-Type"])
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
                self._send(answer.status, answer.read(), answer.headers.get("Content-Type"))
        except urllib.error.HTTPError as exc:
            self._send(exc.code, exc.read(), exc.headers.get("Content-Type"))
        except OSError as exc:
            what = "the metrics store" if base == self.store else "the rule evaluator"
            why = f"{what} at {base} does not answer: {exc}"
            detail = {"status": "error", "errorType": "unavailable", "error": why}
            self._send(503, json.dumps(detail).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scraping.targetsview")
    parser.add_argument("--listen", required=True, help="HOST:PORT, e.g. 127.0.0.1:29090")
    parser.add_argument("--store", required=True, help="URL of the metrics store")
    parser.add_argument("--rules", default="", help="URL of the rule evaluator (vmalert)")
    parser.add_argument("--scraper", action="append", default=[], help="URL of a scraper")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    Handler.store = args.store.rstrip("/")
    Handler.rules = args.rules.rstrip("/")
    Handler.scrapers = [url.rstrip("/") for url in args.scraper]
    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), Handler)
    server.daemon_threads = True
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
