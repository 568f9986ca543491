"""check_url and outcome_words: one liveness judgement for `mac status`, checks and sweep."""

from __future__ import annotations

import socket

import pytest

from contract.liveness import ProbeResult, check_url, outcome_words
from contract.outcomes import Outcome
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port
from testkit.simfleet import Mode


@pytest.mark.parametrize(
    ("mode", "outcome", "words"),
    [
        (Mode.ANSWER, Outcome.OK, "ok"),
        (Mode.HTTP_500, Outcome.HTTP_STATUS, "HTTP 500"),
        (Mode.REFUSE, Outcome.REFUSED, "refused"),
        (Mode.HANG, Outcome.TIMEOUT, "timeout"),
        (Mode.BAD_BODY, Outcome.BAD_BODY, "bad body"),
    ],
)
def test_it_judges_a_url_as_the_sweep_does(fleet, mode, outcome, words):
    runner = fleet(1)
    runner.set_mode(0, "sys-exporter", mode)

    result = check_url(runner.nodes[0].ip, 29101, "/metrics", timeout=0.5)

    assert result.outcome is outcome
    assert outcome_words(result) == words


class _Unhealthy(JsonHandler):
    def do_GET(self):
        if self.path == "/health":
            self.send_json(503, {"failed": ["database"]})
        else:
            self.send_json(200, {"status": "ok"})


def test_it_says_the_status_of_a_non_metrics_url_and_passes_any_body_on_200():
    with serving(_Unhealthy) as url:
        port = int(url.rsplit(":", 1)[1])
        unhealthy = check_url("127.0.0.1", port, "/health", timeout=2)
        docs = check_url("127.0.0.1", port, "/docs", timeout=2)

    assert (unhealthy.outcome, unhealthy.http_status) == (Outcome.HTTP_STATUS, 503)
    assert outcome_words(unhealthy) == "HTTP 503"
    assert docs.ok and outcome_words(docs) == "ok"


def test_a_closed_port_is_refused_within_the_deadline():
    result = check_url("127.0.0.1", free_port(), "/metrics", timeout=2)
    assert result.outcome is Outcome.REFUSED and result.elapsed < 2
    assert "connection refused" in result.detail


def test_a_listener_that_never_answers_times_out():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the connection, never sends a byte
        result = check_url("127.0.0.1", listener.getsockname()[1], "/health", timeout=0.3)
    assert result.outcome is Outcome.TIMEOUT and outcome_words(result) == "timeout"
    assert "within 0.3 s" in result.detail


@pytest.mark.parametrize(
    ("outcome", "detail", "words"),
    [
        (Outcome.UNREACHABLE, "unreachable (No route to host)", "unreachable"),
        (Outcome.ERROR, "not an HTTP response", "error: not an HTTP response"),
        (Outcome.ERROR, "", "error"),
    ],
)
def test_the_words_of_the_rarer_outcomes(outcome, detail, words):
    assert outcome_words(ProbeResult("sys-exporter", outcome, None, detail)) == words
