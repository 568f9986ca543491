"""The running lab: SlurmLab starts, drives, reads and stops it (see the package docstring)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import listening_port
from testkit.slurmlab.config import make_gpus, write_config, write_slurmdbd_conf
from testkit.slurmlab.host import (
    SlurmLabError,
    check_can_run,
    check_reachable,
    drop_database,
    lab_user,
    port_open,
    program,
)
from testkit.slurmlab.processes import DAEMON_MARKER, JOB_MARKER, kill_marked, stop_pid_file
from testkit.waiting import WaitTimeout, wait_for

# A unix socket's path is at most 107 bytes; slurmstepd names its sockets
# <spool>/<node>/<node>_<job>.<step> (the batch step is 4294967291).
MAX_SOCKET_PATH = 107
START_ATTEMPTS = 3
# What every slurmd logs here and does not matter: Debian builds the PMIx plugin, which
# finds no PMIx library (jobs here use no MPI), and hwloc's topology in a container.
LOG_NOISE = ("pmix", "MPI:", "hwloc")


class _PortTaken(RuntimeError):
    """A daemon found its port taken (by a process outside the lab); start() tries again."""


@dataclass(frozen=True)
class LabNode:
    """One simulated node: its NodeName, slurmd's port and its GPU device files."""

    name: str
    port: int
    devices: tuple[Path, ...]


@dataclass
class SlurmLab:
    """A running lab (see the module's docstring); `start()` makes one."""

    root: Path
    nodes: tuple[LabNode, ...]
    partition: str
    cluster: str
    controller_port: int
    accounting_database: str | None
    accounting_port: int | None
    env: dict[str, str] = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    # ---------------------------------------------------------------- start

    @classmethod
    def start(
        cls,
        root: Path,
        nodes: Sequence[str] = ("node-1", "node-2", "node-3"),
        gpus_per_node: int = 4,
        *,
        cpus_per_node: int = 16,
        memory_mb: int = 64000,
        partition: str = "gpu",
        accounting: bool = False,
        extra_config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> SlurmLab:
        """Write the configuration under `root`, start every daemon, wait until all nodes are idle.

        `extra_config`: more slurm.conf lines (key → value), e.g. {"Epilog": path}.
        `accounting`: also slurmdbd on the local MariaDB (database `slurmlab_<random>`),
        so that sacct answers. Raises SlurmLabUnavailable where the lab cannot run.
        """
        check_can_run(accounting=accounting)
        root = Path(root).resolve()
        if not nodes or len(set(nodes)) != len(nodes):
            raise ValueError(f"nodes must be distinct names, got {list(nodes)}")
        longest = max(len(f"{root}/spool/{name}/{name}_9999999.4294967291") for name in nodes)
        if longest > MAX_SOCKET_PATH:
            raise ValueError(
                f"the lab's folder {root} is too long for the unix sockets under it "
                f"({longest} > {MAX_SOCKET_PATH} characters): give a shorter one, "
                "e.g. tmp_path_factory.mktemp('slurm') or lab_folder()"
            )
        failures = []
        for _ in range(START_ATTEMPTS):
            lab = cls._prepare(
                root, nodes, gpus_per_node, cpus_per_node, memory_mb, partition, accounting,
                extra_config or {},
            )  # fmt: skip
            try:
                lab._boot(timeout)
            except _PortTaken as exc:
                # something else bound a port between our choosing it and the daemon's bind
                failures.append(str(exc))
                lab.stop()
                lab._clear()
                continue
            except BaseException:
                lab.stop()
                raise
            return lab
        raise SlurmLabError(f"ports taken at every try: {'; '.join(failures)}")

    @classmethod
    def _prepare(
        cls,
        root: Path,
        nodes: Sequence[str],
        gpus: int,
        cpus: int,
        memory_mb: int,
        partition: str,
        accounting: bool,
        extra_config: Mapping[str, str],
    ) -> SlurmLab:
        """The lab's folders, device nodes, ports and configuration; nothing started."""
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o711)  # job users reach their scripts in the spool, nothing else
        for sub in ("etc", "munge", "run", "log", "bin", "dev", *(f"spool/{n}" for n in nodes)):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "spool").chmod(0o711)
        # ports below the ephemeral range: the daemons' own outgoing connections, made
        # while the others start, can never take them (testkit.ports.listening_port)
        taken: set[int] = set()

        def port() -> int:
            chosen = listening_port(taken=taken)
            taken.add(chosen)
            return chosen

        lab = cls(
            root=root,
            nodes=tuple(
                LabNode(name, port(), make_gpus(root / "dev" / name, gpus)) for name in nodes
            ),
            partition=partition,
            cluster="maclab",
            controller_port=port(),
            accounting_database=f"slurmlab_{secrets.token_hex(4)}" if accounting else None,
            accounting_port=port() if accounting else None,
            env={**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf")},
        )
        write_config(lab, cpus, memory_mb, gpus, extra_config)
        return lab

    def _boot(self, timeout: float) -> None:
        """Start every daemon; return once every node is idle."""
        self._start_munge()
        if self.accounting_database:
            self.start_accounting()
        self.start_controller(timeout)
        for node in self.nodes:
            self.start_node(node.name)
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            waiting = [node for node in self.nodes if states.get(node.name) != "idle"]
            if not waiting:
                return
            for node in waiting:
                self._check_bound(f"slurmd-{node.name}.log", node.port)
            if time.monotonic() > deadline:
                raise WaitTimeout(
                    f"nodes {', '.join(n.name for n in waiting)} not idle within {timeout:g} s "
                    f"({states})\n{self._log_errors()}"
                )
            time.sleep(0.1)

    def _check_bound(self, log_name: str, port: int | None) -> None:
        """Raise _PortTaken when the daemon of `log_name` could not bind its port."""
        log = self.root / "log" / log_name
        if log.exists() and "Address already in use" in log.read_text(errors="replace"):
            raise _PortTaken(f"{log_name.removesuffix('.log')} could not bind port {port}")

    def _clear(self) -> None:
        """Remove what _prepare and the daemons wrote, for another try in the same folder."""
        for sub in ("etc", "munge", "run", "log", "spool", "bin", "dev"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        (self.root / "reboots.log").unlink(missing_ok=True)

    def _recent_lines(self, names: list[str], count: int = 8) -> str:
        """The last lines slurmctld logged about these nodes, and the end of their slurmd
        and reboot logs: what a wait that timed out needs to say why."""
        lines = []
        controller = self.root / "log" / "slurmctld.log"
        if controller.exists():
            text = controller.read_text(errors="replace").splitlines()
            lines += [f"slurmctld.log: {line}" for line in text if any(n in line for n in names)][
                -count:
            ]
        for name in names:
            for log_name in (f"slurmd-{name}.log", f"reboot-{name}.log"):
                log = self.root / "log" / log_name
                if log.exists():
                    tail = log.read_text(errors="replace").splitlines()[-count:]
                    lines += [f"{log_name}: {line}" for line in tail]
        return "\n".join(lines)

    def _log_errors(self) -> str:
        """The errors the daemons of nodes that are not idle logged (for a failed start)."""
        states = self.node_states() if self.controller_up() else {}
        lines = []
        for node in self.nodes:
            if states.get(node.name) == "idle":
                continue
            log = self.root / "log" / f"slurmd-{node.name}.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            lines += [
                f"{log.name}: {line}"
                for line in text.splitlines()
                if ("error" in line or "fatal" in line)
                and not any(noise in line for noise in LOG_NOISE)
            ][-3:]
        return "\n".join(lines)

    def __enter__(self) -> SlurmLab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def conf(self) -> Path:
        """slurm.conf: what SLURM_CONF names for every client of this lab."""
        return self.root / "etc" / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]

    # ---------------------------------------------------------------- daemons

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def _daemon_env(self, **extra: str) -> dict[str, str]:
        return {**self.env, DAEMON_MARKER: str(self.root), **extra}

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.chmod(0o700)
        key = munge / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._launch(
            "munged",
            "--force",
            f"--socket={self.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={self.root / 'run' / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        )
        wait_for(self.munge_socket.exists, 10, 0.02, what=f"munged's socket {self.munge_socket}")

    def conf_with_another_munge_key(self) -> Path:
        """A copy of slurm.conf for a client whose munged has a key of its own: a master
        given a munge key that is not the cluster's. slurmctld takes its connections and
        closes them unanswered ("Zero Bytes were transmitted or received"; `scontrol
        ping` says DOWN). The second munged (socket in munge-other/) stops with the lab;
        a second call returns the same copy."""
        conf = self.root / "etc" / "slurm-other-key.conf"
        if conf.exists():
            return conf
        munge = self.root / "munge-other"
        munge.mkdir(mode=0o700, exist_ok=True)
        key = munge / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        socket = munge / "munge.socket"
        self._launch(
            "munged",
            "--force",
            f"--socket={socket}",
            f"--key-file={key}",
            f"--pid-file={self.root / 'run' / 'munged-other.pid'}",
            f"--log-file={self.root / 'log' / 'munged-other.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        )
        wait_for(socket.exists, 10, 0.02, what=f"the second munged's socket {socket}")
        # AuthInfo, and AccountingStoragePass where slurmdbd runs: every socket the
        # tools would ask munge for a credential
        conf.write_text(self.conf.read_text().replace(str(self.munge_socket), str(socket)))
        return conf

    def start_accounting(self) -> None:
        """Start slurmdbd (again, after stop_accounting) and wait until it listens."""
        write_slurmdbd_conf(self)
        self._launch("slurmdbd")

        def listening() -> bool:
            self._check_bound("slurmdbd.log", self.accounting_port)
            return port_open(self.accounting_port)

        wait_for(
            listening,
            30,
            0.05,
            what=f"slurmdbd on port {self.accounting_port} (log {self.root / 'log'})",
        )

    def stop_accounting(self) -> None:
        """Stop slurmdbd as an outage would (slurmctld keeps its records until it is back)."""
        stop_pid_file(self.root / "run" / "slurmdbd.pid")

    def start_controller(self, timeout: float = 30.0) -> None:
        """Start slurmctld (again, after stop_controller) and wait until it answers a ping."""
        self._launch("slurmctld")

        def answering() -> bool:
            self._check_bound("slurmctld.log", self.controller_port)
            return self.controller_up()

        wait_for(
            answering,
            timeout,
            0.05,
            what=f"slurmctld answering (log {self.root / 'log' / 'slurmctld.log'})",
        )

    def stop_controller(self) -> None:
        """Stop slurmctld as an outage would, the nodes' slurmd left running."""
        stop_pid_file(self.root / "run" / "slurmctld.pid")

    def controller_up(self) -> bool:
        done = subprocess.run(
            ["scontrol", "ping"], env=self.env, capture_output=True, text=True, timeout=15
        )
        return done.returncode == 0 and " is UP" in done.stdout

    def start_node(self, name: str) -> None:
        """Start the slurmd of node `name` (it registers with slurmctld by itself)."""
        self._launch("slurmd", "-N", name, env={f"{DAEMON_MARKER}_NODE": name})

    def stop_node(self, name: str) -> None:
        """Stop the slurmd of node `name`; slurmctld sees it as not responding later."""
        stop_pid_file(self.root / "run" / f"slurmd-{name}.pid")

    def _launch(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> None:
        """Run a daemon, which forks into the background; its pid file says where it went."""
        done = subprocess.run(
            [program(name), *args],
            env=self._daemon_env(**(env or {})),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise SlurmLabError(
                f"{name} {' '.join(args)} exited with {done.returncode}: "
                f"{(done.stderr or done.stdout).strip()} (logs in {self.root / 'log'})"
            )

    # ---------------------------------------------------------------- commands

    def run(self, *argv: str, check: bool = True, timeout: float = 30.0) -> str:
        """Run a Slurm client command against this lab; its standard output."""
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise SlurmLabError(
                f"{' '.join(argv)} exited with {done.returncode}: "
                f"{(done.stderr or done.stdout).strip()}"
            )
        return done.stdout

    def scontrol(self, *args: str, check: bool = True) -> str:
        return self.run("scontrol", *args, check=check)

    def sinfo(self, *args: str) -> str:
        return self.run("sinfo", *args)

    def squeue(self, *args: str) -> str:
        return self.run("squeue", *args)

    def sacct(self, *args: str) -> str:
        return self.run("sacct", *args)

    def submit(
        self,
        *,
        seconds: float = 60,
        gpus: int = 0,
        node: str | None = None,
        nodes: int = 1,
        user: str | None = None,
        name: str = "lab-job",
        account: str | None = None,
        command: str | None = None,
    ) -> int:
        """sbatch a job that sleeps `seconds` (or runs `command`), as `user`; its job id.

        `gpus` per node (`--gres=gpu:N`); `node` pins it to one node. A user other than
        root must exist (ensure_users); the job then runs as that user, in /tmp.
        """
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--partition={self.partition}",
            f"--nodes={nodes}",
            "--output=/dev/null",
            "--chdir=/tmp",
            # only the marker: stop() finds the job's processes by it
            f"--export={JOB_MARKER}={self.root}",
        ]
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        if node:
            argv.append(f"--nodelist={node}")
        if account:
            argv.append(f"--account={account}")
        if user and user != "root":
            entry = lab_user(user)
            check_reachable(self.root / "spool", user)
            argv += [f"--uid={entry.pw_uid}", f"--gid={entry.pw_gid}"]
        argv += ["--wrap", command or f"exec /bin/sleep {seconds:g}"]
        return int(self.run(*argv).strip().split(";")[0])

    def cancel_all(self) -> None:
        self.run("scancel", f"--partition={self.partition}", check=False)

    # ---------------------------------------------------------------- reading

    def node_states(self) -> dict[str, str]:
        """NodeName → state as `sinfo -N -o %T` writes it (idle, drained, mixed, reboot^...)."""
        out = self.sinfo("-h", "-N", "-o", "%N|%T")
        return dict(line.split("|", 1) for line in out.split())

    def job_state(self, job_id: int) -> str:
        out = self.squeue("-h", "-j", str(job_id), "-t", "all", "-o", "%T")
        return out.strip()

    def reboots(self, name: str | None = None) -> list[tuple[float, str]]:
        """(time, node) of every boot the lab's reboot program recorded, oldest first."""
        log = self.root / "reboots.log"
        if not log.exists():
            return []
        entries = [line.split() for line in log.read_text().splitlines() if line.strip()]
        return [(float(when), node) for when, node in entries if name in (None, node)]

    # ---------------------------------------------------------------- waiting

    def wait_nodes(self, *states: str, nodes: Iterable[str] | None = None, timeout=30.0) -> None:
        """Until every one of `nodes` (default: all) is in one of `states` (sinfo's %T)."""
        wanted = list(nodes or self.node_names)
        try:
            wait_for(
                lambda: all(self.node_states().get(name) in states for name in wanted),
                timeout,
                0.1,
                what=f"nodes {', '.join(wanted)} {'/'.join(states)}",
            )
        except WaitTimeout as exc:
            raise WaitTimeout(
                f"{exc}; now {self.node_states()}\n{self._recent_lines(wanted)}"
            ) from None

    def wait_job(self, job_id: int, *states: str, timeout: float = 30.0) -> str:
        """Until job `job_id` is in one of `states` (RUNNING, COMPLETED...); that state."""
        return wait_for(
            lambda: (state := self.job_state(job_id)) in states and state,
            timeout,
            0.1,
            what=f"job {job_id} {'/'.join(states)}",
        )

    # ---------------------------------------------------------------- stop

    def stop(self) -> None:
        """Cancel every job, stop every daemon, kill what is left of the lab, drop its database."""
        if self._stopped:
            return
        self._stopped = True
        run = self.root / "run"
        if (run / "slurmctld.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.cancel_all()
        for pid_file in sorted(run.glob("slurmd-*.pid")):
            stop_pid_file(pid_file)
        for name in ("slurmctld.pid", "slurmdbd.pid", "munged.pid", "munged-other.pid"):
            stop_pid_file(run / name)
        kill_marked(str(self.root))
        if self.accounting_database:
            drop_database(self.accounting_database)
