"""The targets view on 29090 in scale-out mode: every scraper's targets in one answer.

The guide checks scraping with `curl -s http://localhost:29090/api/v1/targets`. With
several vmagent scrapers each knows only its own share, so this small server answers
that URL with the union of each scraper's own `/api/v1/targets` (vmagent serves
Prometheus's format), every target marked with the `scraper` that holds it
("0/2"), plus `data.scrapers`, one entry per scraper with its health. A scraper that
does not answer is listed there as down; its targets are missing from the union until
it is back, which is exactly the gap in their metrics.

Any other GET or POST (queries, `/api/v1/series`...) is passed to the store, so the
port keeps answering PromQL as Prometheus did. `/-/ready` and `/-/healthy` are this
server's own. No Django: `python -m healthcheck.targetsview --listen 127.0.0.1:29090
--store URL --scraper URL...` (maccli.scaleout starts it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TIMEOUT = 5.0
PASSED_HEADERS = ("Content-Type", "Content-Encoding")


def fetch_targets(url: str) -> tuple[list[dict], list[dict], str]:
    """(active, dropped, error) of one scraper; error is "" when it answered."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=TIMEOUT) as answer:  # noqa: S310
            data = json.load(answer)["data"]
    except (OSError, ValueError, KeyError) as exc:
        return [], [], str(getattr(exc, "reason", None) or exc)
    return data.get("activeTargets") or [], data.get("droppedTargets") or [], ""


def merged_targets(scrapers: list[str]) -> dict:
    """The Prometheus /api/v1/targets answer for every scraper at once."""
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(scrapers)))) as pool:
        answers = list(pool.map(fetch_targets, scrapers))
    active: list[dict] = []
    dropped: list[dict] = []
    status = []
    of = len(scrapers)
    for index, (url, (mine, gone, error)) in enumerate(zip(scrapers, answers, strict=True)):
        shard = f"{index}/{of}"
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


class Handler(BaseHTTPRequestHandler):
    server_version = "mac-targets-view"
    store = ""
    scrapers: list[str] = []

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/-/ready", "/-/healthy"):
            self._send(200, b"ready\n", "text/plain")
        elif path == "/api/v1/targets":
            body = json.dumps(merged_targets(self.scrapers)).encode()
            self._send(200, body, "application/json")
        else:
            self._pass()

    def do_POST(self) -> None:
        self._pass()

    def _pass(self) -> None:
        """The request as it came, to the store; its answer as it comes back."""
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(  # noqa: S310 (the store's URL, from mac)
            self.store + self.path, data=body, method=self.command
        )
        if self.headers.get("Content-Type"):
            request.add_header("Content-Type", self.headers["Content-Type"])
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
                self._send(answer.status, answer.read(), answer.headers.get("Content-Type"))
        except urllib.error.HTTPError as exc:
            self._send(exc.code, exc.read(), exc.headers.get("Content-Type"))
        except OSError as exc:
            why = f"the metrics store at {self.store} does not answer: {exc}"
            detail = {"status": "error", "errorType": "unavailable", "error": why}
            self._send(503, json.dumps(detail).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m healthcheck.targetsview")
    parser.add_argument("--listen", required=True, help="HOST:PORT, e.g. 127.0.0.1:29090")
    parser.add_argument("--store", required=True, help="URL of the metrics store")
    parser.add_argument("--scraper", action="append", default=[], help="URL of a scraper")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    Handler.store = args.store.rstrip("/")
    Handler.scrapers = [url.rstrip("/") for url in args.scraper]
    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), Handler)
    server.daemon_threads = True
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
