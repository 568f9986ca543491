"""schemathesis against the live schema of a real API server (issue 11, defect 8).

The schema is what scripts and agents are promised; every generated request, valid
or not, anonymous or with an API token, must get an answer the schema documents, and
never a 5xx. Every operation is tested by every phase (examples, coverage, fuzzing,
stateful); the coverage phase's boundary and negative cases are most of the requests,
and the fuzzing phase is bounded per operation so that CI stays lean (issue 34). At
least 2,000 requests in all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inventory.liveserver import ApiServer, start_api_server

# Long, but it waits on no clock and owns nothing of the host: it runs beside the heavy
# tests on the quick xdist worker (testkit.xdistworker).
pytestmark = [pytest.mark.slow, pytest.mark.no_deadline, pytest.mark.timeout(600)]

CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
EXAMPLES = 25  # per operation in the fuzzing phase; the coverage phase adds its own


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> ApiServer:
    # A limit no fuzzer reaches, so that registration's own rules are what it explores.
    api = start_api_server(tmp_path_factory.mktemp("fuzz"), {"MAC_REGISTER_RATE": "1000000/min"})
    yield api
    api.stop()


def run_schemathesis(server: ApiServer, tmp_path: Path, *headers: str) -> tuple[str, int]:
    args = [
        SCHEMATHESIS, "--config-file", str(CONFIG), "--no-color",
        "run", f"{server.url}/api/v1/schema/?format=json", "--url", server.url,
        "--checks", "all", "--max-examples", str(EXAMPLES), "--seed", "11",
        "--generation-database", "none", "--workers", "1", "--request-timeout", "20",
    ]  # fmt: skip
    for header in headers:
        args += ["-H", header]
    done = subprocess.run(
        args, cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    output = done.stdout + done.stderr
    # "N generated, N passed" only when nothing failed and nothing errored.
    clean = re.search(r"(\d+) generated, \1 passed[,\s]", output)
    summary = output.split("SUMMARY")[-1]
    assert done.returncode == 0 and clean and " error" not in summary, output[-8000:]
    # Every operation of the schema, not only those the first phases reached.
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", summary)
    assert selected and len(set(selected.groups())) == 1, summary
    return output, int(clean.group(1))


def test_it_answers_generated_requests_as_the_schema_says(server, tmp_path):
    token = server.api_token()

    _, anonymous_count = run_schemathesis(server, tmp_path)
    authenticated, authenticated_count = run_schemathesis(
        server, tmp_path, f"Authorization: Token {token}"
    )

    # With the token the nodes list and detail answer (only /self wants a node key).
    assert "401 Unauthorized" not in authenticated, authenticated[-4000:]
    server_errors = re.findall(r'HTTP/1\.1" 5\d\d', server.log.read_text(errors="replace"))
    assert not server_errors, server.log_tail()
    assert anonymous_count + authenticated_count >= 2000, (anonymous_count, authenticated_count)
