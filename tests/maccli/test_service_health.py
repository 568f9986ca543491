"""The HEALTH column of `mac status`: the master's judgement of a liveness URL, in its words."""

from __future__ import annotations

import socket

from maccli.runtimes.base import ServiceSpec, probe
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port


class _Service(JsonHandler):
    def do_GET(self):
        if self.path == "/metrics":
            self.send_json(200, b"# TYPE up gauge\nup 1\n")
        elif self.path == "/health":
            self.send_json(503, {"failed": ["database"]})
        else:
            self.send_json(200, b"<html>not metrics</html>")


def test_it_says_ok_http_status_and_bad_body_as_the_sweep_would():
    with serving(_Service) as url:
        assert probe(f"{url}/metrics") == "ok"
        assert probe(f"{url}/health") == "HTTP 503"
        # A 200 that is not a Prometheus exposition is no healthy exporter to the master.
        assert probe(f"{url}/broken/metrics") == "bad body"


def test_it_says_refused_and_timeout():
    assert probe(f"http://127.0.0.1:{free_port()}/metrics") == "refused"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert probe(f"http://127.0.0.1:{port}/health", timeout=0.3) == "timeout"


def test_a_service_without_a_liveness_url_has_no_health():
    spec = ServiceSpec("worker", ["celery"], port=None)
    assert spec.liveness_url is None and probe(spec.liveness_url) == "-"
