"""Settings that only read, and `manage.py prepare_master`, which makes what they read.

Each case runs real processes: a process loads the settings once, at start-up, so
"nothing is created on import" and "every process reads the same key" can only be
seen from fresh ones.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from macweb.checks import check_master_prepared

REPO = Path(__file__).resolve().parents[2]
UNSET = (
    "SECRET_KEY",
    "MAC_SECRET_KEY",
    "MAC_DATA_DIR",
    "MAC_STATIC_ROOT",
    "MAC_METRICS_TOKEN",
    "MAC_SD_TOKEN",
    "MAC_CACHE_PREFIX",
)


def master_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(DJANGO_SETTINGS_MODULE="macweb.settings", MAC_DATA_DIR=str(data_dir), **extra)
    return env


def manage(data_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=master_env(data_dir, **extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def setting_of_a_new_process(data_dir: Path, name: str = "SECRET_KEY", **extra: str):
    code = "import django; django.setup(); from django.conf import settings as s; "
    code += f"import json; print(json.dumps(s.{name}))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=master_env(data_dir, **extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_loading_the_settings_and_checking_create_nothing(tmp_path):
    data = tmp_path / "data"
    code = "import django; django.setup(); from django.conf import settings; settings.STATIC_ROOT"
    subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=master_env(data), timeout=120, check=True
    )

    checked = manage(data, "check")

    assert tree(tmp_path) == []
    assert checked.returncode != 0
    assert "macweb.E001" in checked.stderr and "macweb.E002" in checked.stderr
    assert "manage.py prepare_master" in checked.stderr


def test_it_creates_the_folders_and_a_private_key_that_every_process_reads(tmp_path):
    data = tmp_path / "data"

    done = manage(data, "prepare_master")

    assert done.returncode == 0, done.stderr
    key_file = data / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert (data / "static").is_dir()
    key = key_file.read_text().strip()
    assert len(key) >= 50
    assert f"created {key_file}" in done.stdout
    assert setting_of_a_new_process(data) == setting_of_a_new_process(data) == key
    assert manage(data, "check").returncode == 0


def test_a_second_run_keeps_the_key(tmp_path):
    data = tmp_path / "data"
    manage(data, "prepare_master")
    first = (data / "secret_key").read_text()

    again = manage(data, "prepare_master")

    assert again.returncode == 0, again.stderr
    assert (data / "secret_key").read_text() == first
    assert "kept" in again.stdout
    # No temporary files.
    assert tree(data) == ["installation_id", "metrics_token", "secret_key", "static"]


def test_a_key_readable_by_others_is_kept_and_made_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret_key").write_text("an-operator-chosen-key\n")
    (data / "secret_key").chmod(0o644)

    done = manage(data, "prepare_master")

    assert done.returncode == 0, done.stderr
    assert (data / "secret_key").read_text() == "an-operator-chosen-key\n"
    assert stat.S_IMODE((data / "secret_key").stat().st_mode) == 0o600
    assert "mode tightened to 0600" in done.stdout


def test_an_empty_key_file_is_replaced(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret_key").write_text("\n")

    assert manage(data, "prepare_master").returncode == 0

    assert len((data / "secret_key").read_text().strip()) >= 50


def test_a_key_from_the_environment_needs_no_file(tmp_path):
    data = tmp_path / "data"

    done = manage(data, "prepare_master", MAC_SECRET_KEY="from-the-orchestrator")

    assert done.returncode == 0, done.stderr
    assert not (data / "secret_key").exists()
    assert "from MAC_SECRET_KEY in the environment" in done.stdout
    assert manage(data, "check", MAC_SECRET_KEY="from-the-orchestrator").returncode == 0


def test_it_names_a_data_folder_it_cannot_create(tmp_path):
    (tmp_path / "a-file").write_text("")
    data = tmp_path / "a-file" / "data"

    done = manage(data, "prepare_master")

    assert done.returncode != 0
    assert f"MAC_DATA_DIR={data} cannot be created" in done.stderr


def test_quiet_at_verbosity_zero(tmp_path):
    done = manage(tmp_path / "data", "prepare_master", "-v0")
    assert done.returncode == 0 and done.stdout == ""


def test_the_check_passes_for_the_tests_own_settings():
    # The tests take their key from the environment (pyproject's pytest env) and
    # their data folder from MAC_DATA_DIR, which must exist.
    assert check_master_prepared() == []


def test_the_check_names_the_missing_key_file(settings, tmp_path):
    settings.SECRET_KEY_SOURCE = ""
    settings.SECRET_KEY_FILE = tmp_path / "secret_key"
    settings.DATA_DIR = tmp_path

    errors = check_master_prepared()

    assert [e.id for e in errors] == ["macweb.E001"]
    assert str(tmp_path / "secret_key") in errors[0].msg
    assert "manage.py prepare_master" in errors[0].hint


@pytest.mark.parametrize("name", ["SECRET_KEY", "MAC_SECRET_KEY"])
def test_both_environment_names_are_read(tmp_path, name):
    env = {name: "shared-by-every-process"}
    code = (
        "from django.conf import settings; print(settings.SECRET_KEY, settings.SECRET_KEY_SOURCE)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**master_env(tmp_path / "data"), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["shared-by-every-process", name]


def test_it_makes_the_metrics_token_that_every_process_requires(tmp_path):
    data = tmp_path / "data"

    done = manage(data, "prepare_master")

    token_file = data / "metrics_token"
    assert f"Metrics token: created {token_file}" in done.stdout
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32
    assert setting_of_a_new_process(data, "METRICS_TOKEN") == token
    # http_sd takes it too while MAC_SD_TOKEN is unset.
    assert setting_of_a_new_process(data, "SD_TOKEN") == token
    manage(data, "prepare_master")
    assert token_file.read_text().strip() == token  # kept: Prometheus's copy stays valid


def test_metrics_token_off_opens_metrics_and_writes_no_file(tmp_path):
    data = tmp_path / "data"

    done = manage(data, "prepare_master", MAC_METRICS_TOKEN="off")

    assert "Metrics token: from MAC_METRICS_TOKEN in the environment" in done.stdout
    assert not (data / "metrics_token").exists()
    assert setting_of_a_new_process(data, "METRICS_TOKEN", MAC_METRICS_TOKEN="off") == ""
    assert setting_of_a_new_process(data, "METRICS_TOKEN_OFF", MAC_METRICS_TOKEN="OFF")
    assert setting_of_a_new_process(data, "SD_TOKEN", MAC_METRICS_TOKEN="off") == ""


def test_the_check_warns_when_metrics_is_open_by_accident(settings, tmp_path):
    settings.METRICS_TOKEN_SOURCE = ""
    settings.METRICS_TOKEN_FILE = tmp_path / "metrics_token"

    [warning] = check_master_prepared()

    assert warning.id == "macweb.W001"
    assert str(tmp_path / "metrics_token") in warning.msg
    assert "MAC_METRICS_TOKEN=off" in warning.hint


def cache_prefix(data: Path, **extra: str) -> str:
    return setting_of_a_new_process(data, "CACHES", **extra)["default"]["KEY_PREFIX"]


def test_each_installation_keeps_its_cache_records_under_its_own_id(tmp_path):
    """A new master on a Redis another master used never reads (and posts) its records."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert cache_prefix(first) == "mac"  # not prepared yet

    made = manage(first, "prepare_master")
    manage(second, "prepare_master")

    installation = (first / "installation_id").read_text().strip()
    assert f"Installation id: created {first / 'installation_id'}" in made.stdout
    assert len(installation) == 16
    assert cache_prefix(first) == cache_prefix(first) == f"mac-{installation}"
    assert cache_prefix(second) not in (cache_prefix(first), "mac")
    manage(first, "prepare_master")
    assert cache_prefix(first) == f"mac-{installation}"  # kept across restarts
    assert cache_prefix(first, MAC_CACHE_PREFIX="site-mac") == "site-mac"
