"""The schema endpoint answers concurrent first requests of a fresh process with 200s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Eight threads ask a fresh process for the schema at the same moment; prints the codes.
_RACE = """
import threading
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
codes, start = [], threading.Barrier(8)
def ask():
    client = Client(raise_request_exception=False)
    start.wait()
    codes.append(client.get("/api/v1/schema/").status_code)
threads = [threading.Thread(target=ask) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(" ".join(map(str, sorted(codes))))
"""


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_first_schema_requests_all_succeed(attempt, tmp_path: Path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "macweb.settings", "MAC_DATA_DIR": str(tmp_path)}
    subprocess.run(
        [sys.executable, "-m", "django", "prepare_master", "-v0"], env=env, check=True, timeout=60
    )
    done = subprocess.run(
        [sys.executable, "-c", _RACE], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["200"] * 8, done.stderr[-2000:]
