"""Real servers for the alerting tests and the alert-latency benchmark.

- Debian's prometheus-alertmanager on a free loopback port, reading a given
  alertmanager.yml (no gossip port);
- a webhook receiver: a real HTTP server that keeps every notification Alertmanager
  POSTs (its own JSON), with the time each arrived;
- a redirecting receiver: a real HTTP server that answers every POST with a redirect
  elsewhere (issue 31: Alertmanager must not follow it);
- an SMTP sink: aiosmtpd's real SMTP server keeping every message it receives.
"""

from __future__ import annotations

import email
import email.policy
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiosmtpd.controller import Controller

from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.waiting import wait_http

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"


@dataclass
class AlertmanagerServer:
    """One prometheus-alertmanager process; restart() keeps its port and data."""

    config: Path
    data: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AlertmanagerServer:
        self.data.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={self.config}",
                f"--storage.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.data / "alertmanager.log").open("ab"),
        )
        wait_http(f"{self.url}/-/ready", process=self.proc)
        return self

    def kill(self) -> None:
        """SIGKILL: no snapshot of the silences is written, as after a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 10)

    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return json.load(response)


@dataclass
class Notification:
    received_at: float
    body: dict


class WebhookReceiver:
    """A real HTTP server (on loopback unless told) that records what Alertmanager POSTs
    to it."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.notifications: list[Notification] = []
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.notifications.append(Notification(time.time(), json.loads(raw)))
                    receiver._lock.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, predicate, timeout: float) -> Notification | None:
        """The first notification (in arrival order) for which predicate(body) holds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for item in self.notifications:
                    if predicate(item.body):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)

    def matching(self, predicate) -> list[Notification]:
        with self._lock:
            return [item for item in self.notifications if predicate(item.body)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RedirectingReceiver:
    """A real HTTP server on loopback answering every POST with `status` and
    `Location: <location>`, counting the POSTs it got."""

    def __init__(self, location: str, status: int = 307) -> None:
        self.posts = 0
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.posts += 1
                    receiver._lock.notify_all()
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for_posts(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.posts < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpSink:
    """aiosmtpd's SMTP server on loopback, keeping every message (no TLS, no auth)."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self._lock = threading.Condition()
        sink = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                with sink._lock:
                    sink.messages.append(message)
                    sink._lock.notify_all()
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def wait_for(self, predicate, timeout: float) -> EmailMessage | None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for message in self.messages:
                    if predicate(message):
                        return message
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)

    def close(self) -> None:
        self.controller.stop()


def body_text(message: EmailMessage) -> str:
    """The plain-text part of a notification email."""
    part = message.get_body(preferencelist=("plain", "html"))
    return part.get_content() if part is not None else ""


def firing_alerts(
    nodes: list[tuple[int, str]], alertname: str, severity: str, cluster_name: str = "mac"
) -> list[dict]:
    """Alerts as Alertmanager's API v2 takes them, one per (node id, hostname), firing now."""
    now = datetime.now(UTC).isoformat()
    return [
        {
            "labels": {
                "alertname": alertname,
                "severity": severity,
                "node": str(node),
                "hostname": hostname,
                "cluster_name": cluster_name,
            },
            "annotations": {"summary": f"{alertname} on {hostname}"},
            "startsAt": now,
        }
        for node, hostname in nodes
    ]
