"""scripts/bootstrap on a fresh, a half-installed and a set-up Debian, all of them fakes.

The script is the real one, copied into a sandbox (tests/scripts/sandbox.py); apt-get,
dpkg, dpkg-query, systemctl and Python's venv are stand-ins that act on the sandbox's
state: the packages "installed", the services their installs "started".
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.scripts.sandbox import Sandbox, needs_tools

pytestmark = pytest.mark.skipif(bool(needs_tools()), reason=str(needs_tools()))

# The services the script turns off after the install that brought them.
UNWANTED = ("nginx", "victoria-metrics", "slurmctld", "slurmd", "slurmdbd")

APT_GET = r"""
[ "$1" = update ] && exit 0
# install: the arguments that are neither options nor option values are packages.
mkdir -p "$FAKE_STATE/pkgs" "$FAKE_STATE/units"
for arg in "$@"; do
  case $arg in -*|*=*|install) continue ;; esac
  touch "$FAKE_STATE/pkgs/$arg"
  # The commands it brings (those scripts/bootstrap looks for), unless faked already.
  case $arg in
    prometheus-alertmanager) cmds="prometheus-alertmanager amtool" ;;
    iproute2) cmds=ip ;; procps) cmds=pgrep ;; postgresql) cmds=pg_ctlcluster ;;
    docker.io) cmds=dockerd ;; systemd-container) cmds=systemd-nspawn ;;
    victoria-metrics) cmds="victoria-metrics vmagent vmalert vmbackup" ;;
    slurm-client) cmds=scontrol ;; munge) cmds=munged ;; mariadb-server) cmds=mariadbd ;;
    mariadb-client) cmds=mariadb ;; *) cmds=$arg ;;
  esac
  for cmd in $cmds; do
    [ -e "$FAKE_BIN/$cmd" ] || printf '#!/bin/sh\n' > "$FAKE_BIN/$cmd"
    chmod +x "$FAKE_BIN/$cmd"
  done
  # Its postinst enables and starts its service, as Debian's do.
  touch "$FAKE_STATE/units/$arg.enabled" "$FAKE_STATE/units/$arg.active"
done
if [ -n "${FAKE_APT_FAILS:-}" ]; then
  # Failed after the packages' set-up began: dpkg is left half-way.
  echo "The following packages have been unpacked but not yet configured:" > "$FAKE_STATE/audit"
  echo "E: Sub-process /usr/bin/dpkg returned an error code (1)" >&2
  exit 100
fi
"""
DPKG = r"""
case $1 in
  --audit) [ ! -f "$FAKE_STATE/audit" ] || cat "$FAKE_STATE/audit" ;;
  --configure) rm -f "$FAKE_STATE/audit" ;;
esac
"""
DPKG_QUERY = r"""
for pkg; do :; done  # the last argument
if [ -e "$FAKE_STATE/pkgs/$pkg" ]; then printf 'install ok installed'; exit 0; fi
echo "dpkg-query: no packages found matching $pkg" >&2
exit 1
"""
SYSTEMCTL = r"""
for unit; do :; done
case "$1 $2" in
  "is-enabled --quiet") [ -e "$FAKE_STATE/units/$unit.enabled" ] ;;
  "is-active --quiet") [ -e "$FAKE_STATE/units/$unit.active" ] ;;
  "disable --now") rm -f "$FAKE_STATE/units/$unit.enabled" "$FAKE_STATE/units/$unit.active" ;;
esac
"""
# Debian's python3: `-m venv DIR` stops at ensurepip, after making DIR/bin/python, unless
# python3-venv is installed (what the reviewer saw with EnvBuilder).
PYTHON3 = r"""
case $1 in
  --version) echo "Python 3.11.2" ;;
  -m)
    [ "$2" = venv ] || exit 2
    mkdir -p "$3/bin"
    cat > "$3/bin/python" <<'VENVPYTHON'
#!/bin/sh
printf '%s\n' "venv-python $*" >> "$FAKE_CALLS"
if [ "$1" = -m ] && [ "$2" = pip ]; then shift 2; exec "$(dirname "$0")/pip" "$@"; fi
VENVPYTHON
    chmod +x "$3/bin/python"
    if [ ! -e "$FAKE_STATE/pkgs/python3-venv" ]; then
      echo "Error: Command '['$3/bin/python', '-m', 'ensurepip']' returned" \
           "non-zero exit status 1." >&2
      exit 1
    fi
    printf '#!/bin/sh\nprintf "%%s\\n" "pip $*" >> "$FAKE_CALLS"\n' > "$3/bin/pip"
    chmod +x "$3/bin/pip" ;;
esac
"""


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    box = Sandbox(tmp_path)
    box.script("bootstrap")
    box.write("pyproject.toml", "[project]\nname = 'mac-monitor'\n")
    for name, body in {
        "apt-get": APT_GET,
        "dpkg": DPKG,
        "dpkg-query": DPKG_QUERY,
        "systemctl": SYSTEMCTL,
        "python3": PYTHON3,
        "sudo": 'exec "$@"\n',
    }.items():
        box.fake(name, body)
    # Redis answers; PostgreSQL and MariaDB are not asked for (MAC_NEED_*=0 below).
    for name in ("redis-cli", "redis-server", "pg_isready", "pg_ctlcluster", "mariadb", "service"):
        box.fake(name)
    (box.state / "pkgs").mkdir()
    (box.state / "units").mkdir()
    return box


def installed(box: Sandbox, *packages: str) -> None:
    for package in packages:
        (box.state / "pkgs" / package).touch()


def bootstrap(box: Sandbox, **env: str):
    return box.run("bootstrap", MAC_NEED_POSTGRES="0", MAC_NEED_MARIADB="0", **env)


def apt_installs(box: Sandbox) -> list[list[str]]:
    """The package lists of each `apt-get install`."""
    return [
        [arg for arg in call.split() if not arg.startswith("-") and "=" not in arg][1:]
        for call in box.called("apt-get")
        if " install " in f" {call} "
    ]


def a_complete_venv(box: Sandbox) -> None:
    installed(box, "python3-venv")
    done = bootstrap(box)
    assert (box.repo / ".venv" / "bin" / "pip").exists(), done.stderr


# --- H2: Python and its venv module, and a .venv whose creation did not finish.


def test_a_fresh_debian_gets_python3_venv_and_a_venv_with_pip(box: Sandbox) -> None:
    done = bootstrap(box)
    assert done.returncode == 0, done.stdout + done.stderr
    [packages] = apt_installs(box)
    assert {"python3", "python3-venv"} <= set(packages)
    assert (box.repo / ".venv" / "bin" / "pip").exists()
    assert "install -q --disable-pip-version-check -e .[dev]" in box.called("pip")


def test_a_venv_left_without_pip_is_made_again(box: Sandbox) -> None:
    # What an earlier run left: `python3 -m venv .venv` without python3-venv (or stopped
    # by Ctrl-C) made .venv/bin/python, then stopped at ensurepip.
    earlier = subprocess.run(
        [str(box.bin / "python3"), "-m", "venv", str(box.repo / ".venv")],
        env={
            "PATH": os.environ["PATH"],
            "FAKE_STATE": str(box.state),
            "FAKE_CALLS": "/dev/null",
            "FAKE_BIN": str(box.bin),
        },
        capture_output=True,
        text=True,
    )
    assert earlier.returncode != 0 and "ensurepip" in earlier.stderr
    assert (box.repo / ".venv" / "bin" / "python").exists()

    # python3-venv is there now (this run's apt-get, or by hand): the .venv is made
    # again, not skipped for its bin/python.
    installed(box, "python3", "python3-venv")
    done = bootstrap(box)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removing .venv: its creation did not finish" in done.stdout
    assert (box.repo / ".venv" / "bin" / "pip").exists()
    assert "install -q --disable-pip-version-check -e .[dev]" in box.called("pip")


def test_a_working_venv_is_kept_as_it_is(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv")
    first = bootstrap(box)
    assert first.returncode == 0, first.stderr
    keep = box.repo / ".venv" / "lib" / "kept"
    keep.parent.mkdir(parents=True)
    keep.touch()
    box.calls.write_text("")

    again = bootstrap(box)
    assert again.returncode == 0, again.stderr
    assert keep.exists()
    assert not [call for call in box.called("python3") if call.startswith("-m venv")]
    assert not [call for call in box.called("pip") if call.startswith("install")]


def test_another_python_is_not_checked_against_debians_packages(box: Sandbox) -> None:
    box.fake("python3.12", PYTHON3)
    installed(box, "python3-venv")  # for the fake's venv only
    done = bootstrap(box, PYTHON="python3.12")
    assert done.returncode == 0, done.stderr
    assert not box.called("dpkg-query")
    assert (box.repo / ".venv" / "bin" / "pip").exists()


# --- M7: the services the packages start, after a failed or interrupted install.


def test_services_a_failed_install_started_are_turned_off_by_the_next_run(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv")
    first = bootstrap(box, FAKE_APT_FAILS="1")
    assert first.returncode != 0
    [packages] = apt_installs(box)
    started = [unit for unit in UNWANTED if unit in packages]
    # victoria-metrics' commands live in /usr/bin, which this PATH leaves out: always here.
    assert "victoria-metrics" in started
    assert all((box.state / "units" / f"{unit}.enabled").exists() for unit in started)
    assert (box.state / "audit").exists()
    # One package it never got to (its command is not there yet).
    assert "jq" in packages
    (box.bin / "jq").unlink()
    box.calls.write_text("")

    second = bootstrap(box)
    assert second.returncode == 0, second.stdout + second.stderr
    # dpkg finished first, before anything else was installed.
    calls = box.order()
    configure = calls.index("dpkg --configure -a")
    installs = [i for i, call in enumerate(calls) if call.startswith("apt-get -o")]
    assert installs and all(configure < i for i in installs)
    assert not (box.state / "audit").exists()
    # Every service the failed install started is stopped and disabled, though none of
    # their packages was missing this time.
    assert "victoria-metrics" not in {p for run in apt_installs(box) for p in run}
    for unit in started:
        assert f"disable --now {unit}" in box.called("systemctl"), unit
        assert not (box.state / "units" / f"{unit}.enabled").exists(), unit
        assert not (box.state / "units" / f"{unit}.active").exists(), unit
    assert not (box.repo / ".mac-data" / "services-to-disable").exists()

    # And only once: a third run leaves the services to their owner.
    for unit in started:
        (box.state / "units" / f"{unit}.enabled").touch()
    box.calls.write_text("")
    third = bootstrap(box)
    assert third.returncode == 0, third.stderr
    assert not [call for call in box.called("systemctl") if call.startswith("disable")]


def test_an_install_that_goes_through_turns_its_services_off_at_once(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv")
    done = bootstrap(box)
    assert done.returncode == 0, done.stderr
    assert "disable --now victoria-metrics" in box.called("systemctl")
    assert not (box.state / "units" / "victoria-metrics.enabled").exists()
    assert "stopping and disabling the victoria-metrics service" in done.stdout


def test_a_service_the_machines_owner_runs_is_left_alone(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv", "victoria-metrics")
    for command in ("victoria-metrics", "vmagent", "vmalert", "vmbackup"):
        box.fake(command)
    for state in ("enabled", "active"):
        (box.state / "units" / f"victoria-metrics.{state}").touch()
    done = bootstrap(box)
    assert done.returncode == 0, done.stderr
    assert not [call for call in box.called("systemctl") if call.startswith("disable")]
    assert (box.state / "units" / "victoria-metrics.enabled").exists()


def test_half_configured_dpkg_is_finished_even_with_nothing_to_install(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv")
    a_complete_venv(box)
    (box.state / "audit").write_text("The following packages are only half configured:\n nginx\n")
    box.calls.write_text("")
    done = bootstrap(box)
    assert done.returncode == 0, done.stderr
    assert box.called("dpkg").count("--configure -a") == 1
    assert "dpkg was left half-way" in done.stdout
    assert not (box.state / "audit").exists()


def test_a_dpkg_that_cannot_finish_stops_the_run_with_its_error(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv")
    (box.state / "audit").write_text("The following packages are only half configured:\n x\n")
    fails = "echo 'dpkg: error processing x' >&2; exit 1"
    box.fake("dpkg", DPKG.replace('rm -f "$FAKE_STATE/audit"', fails))
    done = bootstrap(box)
    assert done.returncode != 0
    assert "dpkg: error processing x" in done.stderr
    assert not box.called("apt-get")


def test_without_systemd_the_note_is_dropped(box: Sandbox) -> None:
    installed(box, "python3", "python3-venv")
    (box.bin / "systemctl").unlink()
    done = bootstrap(box)
    assert done.returncode == 0, done.stderr
    assert not (box.repo / ".mac-data" / "services-to-disable").exists()
