"""A private Docker engine for tests and CI, in a network namespace of its own.

The real-engine tests must never touch a Docker engine that runs real work (their
`mac stop agent` would remove a node's real `mac-*` containers), and they must not
change the host's networking: dockerd turns IPv4 forwarding on and rewrites iptables
in the namespace it runs in. So the engine runs in a namespace this module creates,
joined to the host by one veth pair in the 198.18.0.0/15 benchmark range:

    host 198.18.250.1/24  <-- veth -->  198.18.250.2/24 namespace (dockerd, containers)

Inside, dockerd's bridges come from 198.19.240.0/20 (`--bip`, `--default-address-pool`),
never from a private range.

With `leftovers`, the namespace first gets what a machine where other Docker engines ran
before leaves behind (issue 31): IPv4 forwarding already on (a new namespace inherits the
host's, and dockerd then leaves FORWARD's policy alone), then another dockerd runs there
and stops, leaving its chains, its docker0 rules in FORWARD and its docker0 bridge, and
legacy iptables tables with policy ACCEPT are planted beside the nft ones. MAC's isolation
must hold there too, not only on a fresh machine.

The data root (images, volumes) lives under /var/tmp so that an engine restart
(`restart()`, the guide's reboot) keeps it; `stop()` removes the namespace and, unless
told to keep it, the data root. Needs root, `dockerd` and iproute2 (Debian: docker.io,
iproute2); `why_unavailable()` says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from testkit import namespaces
from testkit.processes import stop_process

HOST_IP, NS_IP = "198.18.250.1", "198.18.250.2"
# A host engine's chains and FORWARD rules for its docker0, as dockerd 20.10 writes them
# (the earlier engine of `leftovers` must have left them: checked).
LEFTOVER_CHAINS = (
    "DOCKER",
    "DOCKER-ISOLATION-STAGE-1",
    "DOCKER-ISOLATION-STAGE-2",
    "DOCKER-USER",
)
LEFTOVER_FORWARD = (
    ("-j", "DOCKER-USER"),
    ("-j", "DOCKER-ISOLATION-STAGE-1"),
    ("-o", "docker0", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"),
    ("-o", "docker0", "-j", "DOCKER"),
    ("-i", "docker0", "!", "-o", "docker0", "-j", "ACCEPT"),
    ("-i", "docker0", "-o", "docker0", "-j", "ACCEPT"),
)
BRIDGE_IP = "198.19.239.1/24"
ADDRESS_POOL = "base=198.19.240.0/20,size=24"


def why_unavailable() -> str:
    """'' where a private engine can run here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "a private Docker engine needs root (dockerd, network namespaces)"
    for command, package in (
        ("dockerd", "docker.io"),
        ("ip", "iproute2"),
        ("iptables", "iptables"),
    ):
        if not shutil.which(command):
            return f"`{command}` is missing: apt-get install {package}"
    if not docker_cli():
        return "no docker client: apt-get install docker.io"
    return ""


def docker_cli() -> str:
    """The docker client. Debian's (engine 20.10's own) first: a newer one on PATH also works."""
    for candidate in ("/usr/bin/docker", shutil.which("docker") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return ""


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done


@dataclass
class DockerEngine:
    """dockerd in namespace `netns`, reached through `DOCKER_HOST` (a unix socket)."""

    tag: str = field(default_factory=lambda: f"t{os.getpid()}")
    data_root: Path | None = None
    keep_data: bool = False
    leftovers: bool = False
    process: subprocess.Popen | None = None
    namespace_made: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.netns = f"macd{self.tag}"
        self.root = Path(self.data_root or f"/var/tmp/mac-dockerd-{self.tag}")
        # The exec root holds containerd's sockets, whose paths must stay short.
        self.exec_root = Path(f"/run/macd-{self.tag}")
        self.socket = self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        """The environment a docker client (or `mac`) needs to use this engine."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def ns_command(self, *argv: str) -> list[str]:
        """`argv` run inside the engine's namespace (where its published ports are)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def docker(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [docker_cli(), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )

    # --- life cycle -------------------------------------------------------------------

    def start(self, timeout: float = 60) -> DockerEngine:
        if not self.namespace_made:
            # Also one of this name: a killed run's engine whose tag (a pid) came again.
            clear_stale_engines()
            self._make_namespace()
            if self.leftovers:
                self.plant_leftovers()
        self.process = self._dockerd(self.root, self.exec_root, storage_driver(self.root), timeout)
        return self

    def _dockerd(
        self, root: Path, exec_root: Path, driver: str, timeout: float, *extra: str
    ) -> subprocess.Popen:
        """dockerd in the namespace on `root`, once its API answers."""
        root.mkdir(parents=True, exist_ok=True)
        exec_root.mkdir(parents=True, exist_ok=True)
        socket = f"unix://{root / 'docker.sock'}"
        dockerd = [
            "dockerd",
            "--host", socket,
            "--data-root", str(root / "data"),
            "--exec-root", str(exec_root),
            "--pidfile", str(root / "dockerd.pid"),
            "--bip", BRIDGE_IP,
            "--default-address-pool", ADDRESS_POOL,
            "--storage-driver", driver,
            "--log-level", "warn",
            *extra,
        ]  # fmt: skip
        # `ip netns exec` mounts a fresh /sys for the namespace, which hides the host's
        # cgroup hierarchies that dockerd needs: mount them again over it first.
        script = " && ".join([*cgroup_mounts(), 'exec "$@"'])
        argv = self.ns_command("sh", "-c", script, "dockerd", *dockerd)
        log_path = root / "dockerd.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        info = [docker_cli(), "--host", socket, "info", "--format", "{{.ServerVersion}}"]
        deadline = time.monotonic() + timeout
        while subprocess.run(info, capture_output=True, timeout=10, check=False).returncode:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process, 60)
                raise RuntimeError(f"dockerd did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        return process

    def stop_daemon(self, timeout: float = 60) -> None:
        """Stop dockerd as a shutdown would; its containers stop with it."""
        if self.process is None:
            return
        stop_process(self.process, timeout)
        self.process = None

    def restart(self) -> None:
        """The guide's reboot, for the engine: stop dockerd, start it on the same data."""
        self.stop_daemon()
        self.start()

    def stop(self) -> None:
        """Remove every container, stop dockerd, delete the namespace (and the data)."""
        if self.process is not None:
            ids = self.docker("ps", "-aq", timeout=30).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, timeout=120)
        self.stop_daemon()
        _unmount_under(self.exec_root, self.root)
        namespaces.remove(self.netns)
        self.namespace_made = False
        shutil.rmtree(self.exec_root, ignore_errors=True)
        if not self.keep_data:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def host_link(self) -> str:
        """The host's end of the veth pair (where HOST_IP is)."""
        return f"md{self.tag}h"[:15]

    def add_host_addresses(self, ips: list[str]) -> None:
        """More addresses of the outside world on the host's end (simulated nodes the
        containers reach as they reach HOST_IP)."""
        for ip in ips:
            _sh("ip", "addr", "add", f"{ip}/32", "dev", self.host_link)

    def remove_host_addresses(self, ips: list[str]) -> None:
        for ip in ips:
            _sh("ip", "addr", "del", f"{ip}/32", "dev", self.host_link, check=False)

    def _make_namespace(self) -> None:
        host_end, ns_end = self.host_link, f"md{self.tag}n"[:15]
        _sh("ip", "netns", "add", self.netns)
        self.namespace_made = True
        # Which process made it: clear_stale_engines leaves it alone while that one runs.
        namespaces.claim(self.netns)
        try:
            _sh("ip", "-n", self.netns, "link", "set", "lo", "up")
            _sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _sh("ip", "link", "set", ns_end, "netns", self.netns)
            _sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", host_end)
            _sh("ip", "link", "set", host_end, "up")
            _sh("ip", "-n", self.netns, "addr", "add", f"{NS_IP}/24", "dev", ns_end)
            _sh("ip", "-n", self.netns, "link", "set", ns_end, "up")
            _sh("ip", "-n", self.netns, "route", "add", "default", "via", HOST_IP)
        except RuntimeError:
            _sh("ip", "netns", "del", self.netns, check=False)
            _sh("ip", "link", "del", host_end, check=False)
            namespaces.release(self.netns)
            self.namespace_made = False
            raise

    def plant_leftovers(self) -> None:
        """What other Docker engines leave on a machine (see the module docstring): one
        really runs first, and legacy tables are planted beside what it left."""
        self.set_ip_forward(True)
        self._run_an_earlier_engine()
        nft = self.ns_command("iptables-nft", "-w")
        listed = _sh(*nft, "-S").stdout
        missing = [f"-N {chain}" for chain in LEFTOVER_CHAINS if f"-N {chain}" not in listed]
        missing += [
            f"-A FORWARD {' '.join(rule)}"
            for rule in LEFTOVER_FORWARD
            if f"-A FORWARD {' '.join(rule)}" not in listed
        ]
        if missing or "-P FORWARD ACCEPT" not in listed:
            raise RuntimeError(f"the earlier dockerd left other rules than {missing}:\n{listed}")
        legacy = self.ns_command("iptables-legacy", "-w")
        _sh(*legacy, "-P", "FORWARD", "ACCEPT")
        _sh(*legacy, "-A", "FORWARD", "-o", "docker0", "-j", "ACCEPT")
        _sh(*legacy, "-A", "FORWARD", "-i", "docker0", "-j", "ACCEPT")

    def _run_an_earlier_engine(self, timeout: float = 60) -> None:
        """Another engine's whole life in the namespace before this one: dockerd starts,
        writes its chains and its docker0 rules, and stops; they stay (dockerd never
        removes them), as does its docker0 bridge."""
        root = self.root.with_name(self.root.name + "-earlier")
        exec_root = Path(f"/run/macd-{self.tag}e")
        try:
            stop_process(self._dockerd(root, exec_root, "vfs", timeout), 60)
        finally:
            _unmount_under(exec_root, root)
            shutil.rmtree(exec_root, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)

    def forward_policies(self) -> dict[str, str]:
        """{backend: FORWARD's policy} in the engine's namespace, for each backend."""
        policies = {}
        for backend in ("iptables-nft", "iptables-legacy"):
            listed = _sh(*self.ns_command(backend, "-w", "-S", "FORWARD"), check=False)
            for line in listed.stdout.splitlines():
                if line.startswith("-P FORWARD "):
                    policies[backend] = line.split()[2]
        return policies

    def set_ip_forward(self, on: bool) -> None:
        """net.ipv4.ip_forward inside the engine's namespace only (never the host's)."""
        _sh(*self.ns_command("sysctl", "-qw", f"net.ipv4.ip_forward={int(on)}"))


def clear_stale_engines(ns_ip: str = NS_IP) -> list[str]:
    """Remove what engines of killed runs left; the namespaces removed.

    A run killed outright stops no engine: its dockerd goes with the next run's
    testkit.leftovers, but its namespace stays, with its veth holding HOST_IP and
    NS_IP (testkit.namespaces says what follows). A namespace of ours (`ns_ip` in it) is
    another's while the test process that made it runs (its claim) or a dockerd runs in
    it: that is said, not touched. Otherwise it goes, with its veth, its exec and default
    data roots (vfs layers: gigabytes), and the processes left of it: those in it and
    the containers that outlived their dockerd and shims (their root on its data root).
    """
    removed = []
    for name in namespaces.named("macd"):
        if not namespaces.holds(name, ns_ip):
            continue
        namespaces.refuse_if_alive(name, ns_ip)
        tag = name.removeprefix("macd")
        pids = [int(pid) for pid in _sh("ip", "netns", "pids", name, check=False).stdout.split()]
        engines = [pid for pid in pids if _command_name(pid) == "dockerd"]
        if engines:
            raise namespaces.HeldByALiveRun(
                f"a private Docker engine (dockerd, pid {engines[0]}) runs in network "
                f"namespace {name} and holds {ns_ip}: let its test run end, or stop it "
                f"(kill {engines[0]}) and then `ip netns del {name}`"
            )
        roots = [Path(f"/run/macd-{tag}"), Path(f"/run/macd-{tag}e")]
        roots += [Path(f"/var/tmp/mac-dockerd-{tag}"), Path(f"/var/tmp/mac-dockerd-{tag}-earlier")]
        for process in _left_of(tag, pids):
            with contextlib.suppress(psutil.Error):
                process.kill()
        _unmount_under(*roots)
        namespaces.remove(name)
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        removed.append(name)
    return removed


def _left_of(tag: str, pids: list[int]) -> list[psutil.Process]:
    """The processes in a dead engine's namespace, their children, and its containers
    (in namespaces of their own, orphaned once their shims went): those whose root is
    under its data root, as their mount table says."""
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            found[pid] = process
            found.update((child.pid, child) for child in process.children(recursive=True))
    marker = f"/mac-dockerd-{tag}/"
    for process in psutil.process_iter():
        if process.pid in found:
            continue
        mounts = _read(Path(f"/proc/{process.pid}/mountinfo"))
        root = next((entry for entry in mounts.splitlines() if entry.split()[4:5] == ["/"]), "")
        if marker in root:
            found[process.pid] = process
    return list(found.values())


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _command_name(pid: int) -> str:
    return _read(Path(f"/proc/{pid}/comm"))


def _unmount_under(*roots: Path) -> None:
    """dockerd leaves its mounts (netns files, vfs/overlay layers) under its roots."""
    for root in roots:
        mounts = _sh("findmnt", "-rn", "-o", "TARGET", check=False).stdout.split()
        under = [m for m in mounts if m == str(root) or m.startswith(f"{root}/")]
        for target in sorted(under, reverse=True):
            _sh("umount", "-l", target, check=False)


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Shell commands that mount this host's cgroup hierarchies again under /sys/fs/cgroup.

    The same hierarchies (v1 controllers, the named systemd one, cgroup2) with the same
    options, so that dockerd in the namespace sees what it would see on the host.
    """
    commands = []
    for line in Path(mountinfo).read_text().splitlines():
        fields = line.split()
        target = fields[4]
        if target != "/sys/fs/cgroup" and not target.startswith("/sys/fs/cgroup/"):
            continue
        fstype, options = fields[fields.index("-") + 1], fields[fields.index("-") + 3]
        if fstype not in {"tmpfs", "cgroup", "cgroup2"}:
            continue
        if target != "/sys/fs/cgroup":
            commands.append(f"mkdir -p {target}")
        commands.append(f"mount -t {fstype} -o {options} {fstype} {target}")
    return commands


def storage_driver(root: Path) -> str:
    """overlay2 where the kernel mounts overlayfs on `root`'s file system, else vfs.

    vfs copies every layer and every container's root file system in full: it works
    everywhere but makes each `docker compose up` copy the image once per container.
    """
    forced = os.environ.get("MAC_TEST_DOCKER_STORAGE")
    if forced:
        return forced
    probe = root / "overlay-probe"
    dirs = {name: probe / name for name in ("lower", "upper", "work", "merged")}
    try:
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
        mounted = _sh("mount", "-t", "overlay", "overlay", "-o", options, str(dirs["merged"]),
                      check=False).returncode == 0  # fmt: skip
        if mounted:
            _sh("umount", str(dirs["merged"]), check=False)
        return "overlay2" if mounted else "vfs"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
