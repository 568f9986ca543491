"""The broker never hands a running chunk to a second worker: its visibility timeout
outlasts a chunk of the configured size (macweb/settings.py), and stays a third of the
interval for small chunks, so that a lost one still runs again within its sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.healthcheck.conftest import REPO

# The slowest chunk measured (docs/benchmarks.md, Sweep): 10,000 nodes, all changing
# status, in 13.43 s with a 3 s probe timeout.
MEASURED_NODES, MEASURED_SECONDS = 10_000, 13.43


def broker_options(**environment: str) -> dict:
    """CELERY_BROKER_TRANSPORT_OPTIONS of a master started with these settings."""
    code = (
        "import json, django; from django.conf import settings; django.setup(); "
        "print(json.dumps(settings.CELERY_BROKER_TRANSPORT_OPTIONS))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "macweb.settings", **environment}
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("size", [10_000, 20_000])
def test_a_chunk_of_the_configured_size_is_never_handed_out_twice(size):
    options = broker_options(
        MAC_SWEEP_CHUNK_SIZE=str(size), MAC_PROBE_INTERVAL="30", MAC_PROBE_TIMEOUT="3"
    )
    takes = MEASURED_SECONDS * size / MEASURED_NODES
    assert options["visibility_timeout"] > takes, options


def test_small_chunks_keep_a_third_of_the_interval():
    options = broker_options(
        MAC_SWEEP_CHUNK_SIZE="100", MAC_PROBE_INTERVAL="30", MAC_PROBE_TIMEOUT="3"
    )
    assert options["visibility_timeout"] == 10
    assert options["unacked_restore_interval"] == 3
