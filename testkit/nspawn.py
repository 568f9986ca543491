"""A real systemd for tests: a Debian tree booted with systemd-nspawn, in its own network.

The `mac-<role>.service` units (maccli.systemd) and the networkd drop-in of
`mac doctor --fix` need systemd as PID 1 and a running systemd-networkd, which a test
machine (a container, CI) does not have. `systemd-nspawn --boot` gives both: the tree
is Debian's own (debootstrap, PACKAGES below), booted with `--network-veth` so that
networkd manages the container's host0 in a network namespace of its own, and with
`--volatile=overlay` so that nothing a test does ever reaches the cached tree.

The tree is built once per machine and cached under /var/tmp, keyed by a hash of the
suite and the package list (`tree_path()`); a change of PACKAGES builds a new one.
Every build and boot holds /tmp/mac-nspawn.lock (flock), so parallel runs on one
machine take turns. The checkout and its interpreter are bound read-only at their own
paths, so code runs inside the container exactly as here. Needs root, debootstrap and
systemd-container (scripts/bootstrap installs both); `NspawnUnavailable` says why not.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from node.runner import CommandResult

PACKAGES = ("systemd", "systemd-sysv", "dbus", "iproute2", "procps", "python3")
LOCK = Path("/tmp/mac-nspawn.lock")
CACHE = Path("/var/tmp")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
REPO = Path(__file__).resolve().parents[1]
BOOT_TIMEOUT = 120.0


class NspawnUnavailable(RuntimeError):
    """nspawn cannot boot a tree here; the message says why (for a test's skip)."""


def suite() -> str:
    """The host's Debian release, so the tree's python3 and libc are the host's."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "bookworm"
    match = re.search(r"^VERSION_CODENAME=(\w+)", text, re.MULTILINE)
    is_debian = re.search(r"^ID=debian$", text, re.MULTILINE)
    return match.group(1) if match and is_debian else "bookworm"


def mirror() -> str:
    """The Debian mirror apt already uses (MAC_DEBIAN_MIRROR overrides it)."""
    if os.environ.get("MAC_DEBIAN_MIRROR"):
        return os.environ["MAC_DEBIAN_MIRROR"]
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for url in re.findall(r"(?:^URIs:|^deb)\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.MULTILINE):
            if "/debian" in url and "security" not in url:
                return url.rstrip("/")
    return DEFAULT_MIRROR


def tree_path() -> Path:
    key = json.dumps({"suite": suite(), "packages": sorted(PACKAGES), "layout": 1})
    return CACHE / f"mac-nspawn-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@contextmanager
def machine_lock() -> Iterator[None]:
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _require_tools() -> None:
    if os.geteuid() != 0:
        raise NspawnUnavailable("systemd-nspawn needs root")
    for program, package in (
        ("systemd-nspawn", "systemd-container"),
        ("debootstrap", "debootstrap"),
    ):
        if not shutil.which(program):
            raise NspawnUnavailable(f"{program} is missing (Debian package {package})")


def ensure_tree() -> Path:
    """The cached tree, built with debootstrap on first use (call it under machine_lock)."""
    _require_tools()
    tree = tree_path()
    if (tree / ".mac-complete").exists():
        return tree
    building = tree.with_name(tree.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    log = tree.with_name(tree.name + ".log")
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite(),
            str(building), mirror()]  # fmt: skip
    with log.open("wb") as handle:
        done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        shutil.rmtree(building, ignore_errors=True)
        raise NspawnUnavailable(f"debootstrap {suite()} failed (see {log}): {tail}")
    # networkd manages host0 from the first boot on; the serial getty only adds noise.
    subprocess.run(
        ["systemctl", f"--root={building}", "enable", "systemd-networkd.service"],
        capture_output=True, check=True,
    )  # fmt: skip
    subprocess.run(
        ["systemctl", f"--root={building}", "mask", "console-getty.service"],
        capture_output=True, check=True,
    )  # fmt: skip
    (building / ".mac-complete").write_text(" ".join(argv) + "\n")
    shutil.rmtree(tree, ignore_errors=True)
    building.rename(tree)
    return tree


def interpreter_binds() -> list[str]:
    """What the checkout's Python needs inside: the checkout, and a non-Debian interpreter."""
    binds = [str(REPO)]
    prefix = Path(sys.base_prefix).resolve()
    if prefix != Path("/usr"):  # e.g. pyenv; Debian's own /usr/bin/python3 is in the tree
        binds.append(str(prefix))
    venv = Path(sys.prefix).resolve()
    if not venv.is_relative_to(REPO) and venv != prefix:
        binds.append(str(venv))
    return binds


def _descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            queue.append(child)
    return found


def _container_init(nspawn: int) -> int | None:
    """PID (here) of the container's systemd: a descendant of nspawn in another PID namespace."""
    own = os.readlink("/proc/self/ns/pid")
    for pid in _descendants(nspawn):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            continue
        if comm == "systemd" and namespace != own:
            return pid
    return None


@dataclass
class Machine:
    """A booted container: run commands in it, see its host-side veth, stop it."""

    name: str
    init: int  # the container's PID 1, as seen from here
    process: subprocess.Popen
    log: Path

    @property
    def host_veth(self) -> str:
        return f"ve-{self.name}"

    def run(self, *argv: str, timeout: float = 60, env: dict | None = None):
        """`argv` inside the container (every namespace of its PID 1), as CompletedProcess."""
        prefix = ["nsenter", "-t", str(self.init), "-a"]
        if env is not None:
            prefix += ["env", "-i", *(f"{key}={value}" for key, value in env.items())]
        return subprocess.run(
            [*prefix, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )

    def runner(self, argv: Sequence[str]) -> CommandResult:
        """node.runner' Runner shape, for code that takes one (SystemdUnits, checks)."""
        done = self.run(*argv)
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def python(self, code: str, *args: str, timeout: float = 120, **env: str):
        """Run Python code (with `args` as sys.argv[1:]) in the container, with the
        checkout's interpreter and a clean environment plus `env`."""
        environment = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                       "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(REPO), **env}  # fmt: skip
        return self.run(sys.executable, "-c", code, *args, timeout=timeout, env=environment)

    def stop(self) -> None:
        """Power off like `machinectl poweroff` (SIGRTMIN+4 to its systemd), else kill."""
        if self.process.poll() is not None:
            return
        try:
            os.kill(self.init, signal.SIGRTMIN + 4)
            self.process.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            kill_tree(self.process)


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL nspawn and everything under it, by pid (killing nspawn alone orphans them)."""
    for pid in reversed(_descendants(process.pid)):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.kill()
    process.wait()


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-1500:] if path.exists() else ""


@contextmanager
def booted(log_dir: Path, name: str | None = None) -> Iterator[Machine]:
    """Boot the tree (building it on first use) and yield the running Machine.

    Holds the machine-wide lock until the container is gone. NspawnUnavailable when
    the tree cannot be built or systemd does not come up.
    """
    name = name or f"mac{os.getpid()}"
    log = log_dir / f"nspawn-{name}.log"
    with machine_lock():
        tree = ensure_tree()
        argv = [
            "systemd-nspawn", "--quiet", "--directory", str(tree), "--boot",
            "--machine", name, "--network-veth", "--volatile=overlay",
            # No machined or D-Bus on a test host: run in our own cgroup, register nothing.
            "--register=no", "--keep-unit", "--console=passive",
            *(f"--bind-ro={path}" for path in interpreter_binds()),
        ]  # fmt: skip
        with log.open("wb") as handle:
            process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT)
        machine = None
        try:
            deadline = time.monotonic() + BOOT_TIMEOUT
            init = None
            while init is None:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise NspawnUnavailable(f"systemd-nspawn did not boot {tree}: {_tail(log)}")
                init = _container_init(process.pid)
                time.sleep(0.2)
            machine = Machine(name, init, process, log)
            # systemctl answers once systemd has its socket; --wait then waits for the boot.
            state = machine.run("systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT)
            while not state.stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.2)
                state = machine.run(
                    "systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT
                )
            if state.stdout.strip() not in {"running", "degraded"}:
                raise NspawnUnavailable(
                    f"systemd in {tree} is {state.stdout.strip() or state.stderr.strip()}: "
                    f"{_tail(log)}"
                )
            yield machine
        finally:
            if machine is not None:
                machine.stop()
            elif process.poll() is None:
                kill_tree(process)
