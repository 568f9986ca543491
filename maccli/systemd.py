"""Start at boot where the host boots with systemd: one `mac-<role>.service` unit.

The unit runs the role's supervisord in the foreground (maccli.runtimes.supervisor),
so systemd starts it at boot and restarts it should it die, and supervisord restarts
each service. One unit per role rather than one per service keeps a single source of
truth for restarts, backoff and log rotation on every host (supervisord's), whether
systemd is there or not; `systemctl status mac-agent` still shows every service's
process in the unit's cgroup.

`mac start <role>` installs and enables the unit (when MAC_SYSTEMD allows and the host
runs systemd as root), `mac stop <role>` disables and removes it. Under Docker, where
Docker itself restarts the containers at boot, the master gets one unit of another kind,
`mac-master-isolation.service`: a oneshot after docker.service that puts MAC's rules
back in DOCKER-USER (maccli.runtimes.dockerfence), which live in the kernel only.
MAC_SYSTEMD_UNIT_DIR points the unit files elsewhere than /etc/systemd/system (the tests
do), and MAC_SYSTEMD=no keeps `mac` from touching systemd at all.

The unit is ordered after network.target, not network-online.target: the services
listen on MAC_BIND (every address by default) and supervisord retries one whose
address is not up yet, while network-online.target can wait minutes for a link
without carrier (systemd-networkd-wait-online). Under a real systemd (a booted
nspawn container, tests/maccli/test_nspawn_systemd.py) the old ordering held
`systemctl enable --now` for as long.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from contract import settings
from contract.atomicfile import write_atomically
from maccli.output import CliError
from node.runner import Runner, run_command

UNIT_DIR: Path = settings.setting("MAC_SYSTEMD_UNIT_DIR").default
# `enable --now` waits for the start job; supervisord's start is quick, a loaded host not.
SYSTEMCTL_TIMEOUT = 90.0
# What a role needs up before it: the master's Redis (and PostgreSQL when local).
AFTER = {"master": ["redis-server.service", "postgresql.service"]}


def unit_name(role: str) -> str:
    return f"mac-{role}.service"


def host_runs_systemd(sd_run: Path = Path("/run/systemd/system")) -> bool:
    """sd_booted(): systemd is PID 1 here (not merely installed, as in containers)."""
    return sd_run.is_dir()


def render_unit(role: str, command: list[str], working_dir: Path, stop_grace: float) -> str:
    after = " ".join(["network.target", *AFTER.get(role, [])])
    return "\n".join(
        [
            "# Written by `mac start " + role + "`; `mac stop " + role + "` removes it.",
            "[Unit]",
            f"Description=MAC {role} services (supervisord)",
            f"After={after}",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=" + " ".join(_quote(word) for word in command),
            f"WorkingDirectory={working_dir}",
            # SIGTERM to supervisord alone: it stops each service's process group in
            # turn; whatever is left after the timeout is killed with the cgroup.
            "KillMode=mixed",
            f"TimeoutStopSec={int(stop_grace) + 30}",
            "Restart=always",
            "RestartSec=5",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


ISOLATION_UNIT = "mac-master-isolation.service"


def render_isolation_unit(command: list[str], environment: dict[str, str]) -> str:
    """The boot-time unit that puts MAC's DOCKER-USER rules back for the master network."""
    return "\n".join(
        [
            "# Written by `mac start master` (Docker); `mac stop master` removes it.",
            "[Unit]",
            "Description=MAC master: other hosts kept off its containers (DOCKER-USER rules)",
            # Docker restores its networks and containers at its start; the rules follow.
            "After=docker.service",
            "Requires=docker.service",
            "",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            *(f"Environment={_quote(f'{k}={v}')}" for k, v in sorted(environment.items())),
            "ExecStart=" + " ".join(_quote(word) for word in command),
            "",
            "[Install]",
            # docker.service too: a Docker started later (socket-activated) brings it.
            "WantedBy=multi-user.target docker.service",
            "",
        ]
    )


def _quote(word: str) -> str:
    # systemd's own quoting: double quotes, with backslash escapes; % is a specifier
    # and $ a variable.
    word = word.replace("%", "%%").replace("$", "$$")
    if word and not any(char in word for char in " \t\"\\'"):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SystemdUnits:
    """Installs, enables and removes the unit of a role through systemctl."""

    def __init__(self, unit_dir: Path = UNIT_DIR, run: Runner | None = None) -> None:
        self.unit_dir = Path(unit_dir)
        self.run = run or (lambda argv: run_command(argv, timeout=SYSTEMCTL_TIMEOUT))

    def path(self, role: str) -> Path:
        return self.unit_dir / unit_name(role)

    def installed(self, role: str) -> bool:
        return self.path(role).exists()

    def _systemctl(self, *args: str) -> None:
        result = self.run(["systemctl", *args])
        if result.returncode != 0:
            raise CliError(
                f"systemctl {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}",
                hint="See what systemd says, or run without systemd (MAC_SYSTEMD=no):",
                commands=[f"journalctl -u {args[-1]} -n 50", "mac env set MAC_SYSTEMD=no"],
            )

    def install(self, role: str, command: list[str], working_dir: Path, grace: float) -> None:
        """Write the unit (when it changed) and enable it now and at boot."""
        self._install(unit_name(role), render_unit(role, command, working_dir, grace))

    def remove(self, role: str) -> None:
        """Stop and disable the unit, and delete it: nothing of `mac` starts at boot."""
        self._remove(unit_name(role))

    def install_isolation(self, command: list[str], environment: dict[str, str]) -> None:
        """The master's DOCKER-USER rules put back at each boot (and now)."""
        self._install(ISOLATION_UNIT, render_isolation_unit(command, environment))

    def remove_isolation(self) -> None:
        self._remove(ISOLATION_UNIT)

    def _install(self, name: str, text: str) -> None:
        path = self.unit_dir / name
        try:
            unchanged = path.read_text() == text
        except FileNotFoundError:
            unchanged = False
        if not unchanged:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, text.encode())
            self._systemctl("daemon-reload")
        self._systemctl("enable", "--now", name)

    def _remove(self, name: str) -> None:
        path = self.unit_dir / name
        if not path.exists():
            return
        self._systemctl("disable", "--now", name)
        path.unlink(missing_ok=True)
        self._systemctl("daemon-reload")


def isolation_unit_left(get: Callable[[str], str | None]) -> Path | None:
    """The master's isolation unit an earlier start installed, where `mac` may no longer
    touch systemd (MAC_SYSTEMD=no, or no longer root): it stays enabled and keeps putting
    rules back at boot until someone removes it."""
    try:
        units = settings.values(get)["MAC_SYSTEMD_UNIT_DIR"]
    except settings.SettingError:
        return None
    path = Path(units) / ISOLATION_UNIT
    return path if path.exists() else None


def systemd_units(get: Callable[[str], str | None]) -> SystemdUnits | None:
    """The units to use under MAC_SYSTEMD (auto | yes | no), or None for plain supervisord."""
    read = settings.values(get)
    try:
        choice, units = read["MAC_SYSTEMD"], read["MAC_SYSTEMD_UNIT_DIR"]
    except settings.SettingError as exc:
        raise CliError(str(exc), commands=["mac env set MAC_SYSTEMD=auto"]) from None
    if choice == "no":
        return None
    if choice == "auto" and not (
        host_runs_systemd() and os.geteuid() == 0 and shutil.which("systemctl")
    ):
        return None
    return SystemdUnits(units)
