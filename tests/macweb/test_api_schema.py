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


@pytest.mark.django_db
def test_the_schema_is_generated_once_per_format_and_never_kept_for_callers_words(
    client, monkeypatch
):
    from drf_spectacular.generators import SchemaGenerator

    from macweb.api_schema import SchemaView

    monkeypatch.setattr(SchemaView, "_kept", {})
    generated = []
    original = SchemaGenerator.get_schema

    def counting(self, *args, **kwargs):
        generated.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting)
    json_type = "application/vnd.oai.openapi+json"
    first = client.get("/api/v1/schema/", HTTP_ACCEPT=json_type)
    again = client.get("/api/v1/schema/", HTTP_ACCEPT=json_type)
    assert (first.status_code, again.status_code, len(generated)) == (200, 200, 1)
    assert first.content == again.content and "/api/v1/register" in first.json()["paths"]
    assert again["Content-Disposition"] == first["Content-Disposition"]
    assert again["Content-Disposition"].endswith('.json"')
    yaml_answer = client.get("/api/v1/schema/")  # YAML: generated for its own format once
    assert yaml_answer.status_code == 200 and b"openapi:" in yaml_answer.content
    client.get("/api/v1/schema/")
    assert len(generated) == 2
    # The API has one version: ?version= changes nothing, the kept answer (it used to be a
    # fresh generation under the lock for any word anyone sent).
    for word in ("2", "3", "xx-not-a-version"):
        answer = client.get(f"/api/v1/schema/?version={word}")
        assert answer.status_code == 200 and answer.content == yaml_answer.content
    assert len(generated) == 2 and len(SchemaView._kept) == 2
    # Without translations, `lang` changes nothing either.
    assert client.get("/api/v1/schema/?lang=fr").status_code == 200
    assert len(generated) == 2
