"""The master's settings read the environment through the one declaration of every setting
(contract.settings): its kinds, defaults, limits and words are the master's, as `mac`'s.

Each case loads the settings in a fresh process, as every master process does at start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from contract.settings import setting as declared
from macweb import envconf

REPO = Path(__file__).resolve().parents[2]
# The test run's own settings that the cases below set themselves.
OWN = {"MAC_PROMETHEUS_URL", "MAC_ALERTMANAGER_URL", "MAC_TLS_DIR", "MAC_SD_DIR", "MAC_HTTP"}


def _load(tmp_path: Path, names: tuple[str, ...], **env: str) -> subprocess.CompletedProcess:
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({{n: str(getattr(s, n)) for n in {list(names)!r}}}))"
    )
    environ = {key: value for key, value in os.environ.items() if key not in OWN}
    environ.update(DJANGO_SETTINGS_MODULE="macweb.settings", MAC_DATA_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _values(tmp_path: Path, *names: str, **env: str) -> dict[str, str]:
    done = _load(tmp_path, names, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        # 0..64 in `mac` and in the settings alike (it was only >= 0 here).
        ("MAC_SCRAPE_SHARDS", "65", "MAC_SCRAPE_SHARDS='65' is out of range: use a whole number "
         "from 0 to 64."),
        ("MAC_HTTP", "maybe", "MAC_HTTP='maybe' is not an HTTP mode: use on ("),
        ("MAC_PROBE_INTERVAL", "0.1", "MAC_PROBE_INTERVAL='0.1' is out of range: use a number of "
         "seconds from 0.5 to 3600."),
        ("MAC_SLURM_DRAIN", "yes", "MAC_SLURM_DRAIN='yes': use off (the default)"),
        ("MAC_NODE_NETWORKS", "10.0.0.0/8,lan", "MAC_NODE_NETWORKS='lan' is not a network"),
        ("MAC_LOG_LEVEL", "chatty", "MAC_LOG_LEVEL='chatty' is not a log level"),
        ("DATABASE_URL", "mysql://db/mac", "DATABASE_URL='mysql://db/mac' is not a usable URL"),
    ],
)  # fmt: skip
def test_a_bad_value_stops_start_up_with_the_declared_words(tmp_path, name, value, words):
    done = _load(tmp_path, ("DEBUG",), **{name: value})
    assert done.returncode != 0
    assert f"django.core.exceptions.ImproperlyConfigured: {words}" in done.stderr


def test_defaults_come_from_the_declaration_and_follow_the_settings_they_derive_from(tmp_path):
    got = _values(
        tmp_path,
        "TLS_DIR",
        "SD_DIR",
        "ALERTMANAGER_DIR",
        "PROMETHEUS_URL",
        "TARGETS_URL",
        "ALERTMANAGER_URL",
        "ALERT_NODE_GROUP_INTERVAL",
        "CELERY_BROKER_URL",
        "HTTP_MODE",
        "TLS_PORT",
        MAC_PROMETHEUS_PORT="39090",
        MAC_PROBE_INTERVAL="2",
        MAC_REDIS_URL="redis://127.0.0.1:6379/13",
    )
    assert got == {
        "TLS_DIR": str(tmp_path / "tls"),
        "SD_DIR": str(tmp_path / "prometheus" / "targets"),
        "ALERTMANAGER_DIR": str(tmp_path / "alertmanager"),
        "PROMETHEUS_URL": "http://127.0.0.1:39090",
        "TARGETS_URL": "http://127.0.0.1:39090",
        "ALERTMANAGER_URL": f"http://127.0.0.1:{declared('MAC_ALERTMANAGER_PORT').default}",
        "ALERT_NODE_GROUP_INTERVAL": "2s",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/13",
        "HTTP_MODE": "on",
        "TLS_PORT": "None",  # the port HTTPS listens on (macweb.nginxconf)
    }


def test_given_values_are_read_as_their_kind(tmp_path):
    got = _values(
        tmp_path,
        "HTTP_MODE",
        "DEBUG",
        "SCRAPE_SHARDS",
        "ALERTMANAGER_URL",
        "TRUSTED_PROXIES",
        MAC_HTTP="Redirect",
        MAC_DEBUG="off",
        MAC_SCRAPE_SHARDS="64",
        MAC_ALERTMANAGER_URL="http://am.example.org:9093/",
        MAC_TRUSTED_PROXIES="10.1.0.0/16, 10.2.0.7",
    )
    assert got == {
        "HTTP_MODE": "redirect",
        "DEBUG": "False",
        "SCRAPE_SHARDS": "64",
        "ALERTMANAGER_URL": "http://am.example.org:9093",
        "TRUSTED_PROXIES": "[IPv4Network('10.1.0.0/16'), IPv4Network('10.2.0.7/32')]",
    }


def test_envconf_wraps_the_plain_error_for_django(monkeypatch):
    monkeypatch.setenv("MAC_API_THREADS", "1000")
    with pytest.raises(ImproperlyConfigured, match=r"MAC_API_THREADS='1000' is out of range"):
        envconf.setting("MAC_API_THREADS")
    monkeypatch.delenv("MAC_API_THREADS")
    assert envconf.setting("MAC_API_THREADS") == declared("MAC_API_THREADS").default
    assert envconf.text("MAC_RULES_URL") == ""
