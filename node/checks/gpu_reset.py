"""What an interrupted `mac gpu reset` left behind: MAC's GPU services stopped.

`mac gpu reset` (maccli.gpureset) stops the services that hold the GPUs open, resets the
GPU and starts them again in a ``finally``. A SIGKILL, the OOM killer or a power cut
skips that ``finally``, and the node goes on without its GPU exporter, the master keeping
its last verdict, with nothing to say so. So before it stops them the command writes
what it is about to stop into a small record (RECORD_NAME in the state dir), and
removes it once they run again: a record whose process is gone is a reset that did not
finish, and `mac doctor` says so (check `gpu_reset`) with the fix that starts them.

The record names its process by pid, the process's start time and the boot, so a pid
the kernel gave to another process since, or a record from before a reboot, is not
taken for a reset still running.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from contract.atomicfile import write_atomically
from node.checks.base import CheckContext, CheckResult, CheckStatus, config
from node.checks.fixes import Mac
from node.config import DEFAULT_STATE_DIR_ROOT, NodeConfig
from node.host import Roots, read_boot_id, read_text

CHECK_ID = "gpu_reset"
TITLE = "no `mac gpu reset` left MAC's GPU services stopped"
RECORD_NAME = "gpu-reset.json"
LOCK_NAME = "gpu-reset.lock"
RESTART_AGENT = Mac(("restart", "agent"))


@dataclass(frozen=True)
class ResetRecord:
    """What a running `mac gpu reset` stopped, and which process it is."""

    services: tuple[str, ...]
    runtime: str  # the runtime that stopped them (maccli.runtimes), which starts them
    gpu: str  # the GPU as the command names it: "GPU 1 (00000000:86:00.0, GPU-...)"
    at: float  # when it stopped them (Unix time)
    pid: int
    pid_start: str = ""  # the process's start time (/proc/<pid>/stat), "" where unknown
    boot_id: str = ""

    @classmethod
    def of_this_process(cls, services: list[str], runtime: str, gpu: str, at: float) -> ResetRecord:
        # This process's own facts, read where it runs: the host's /proc, whatever
        # procfs the node's settings name for reading the host (tests, containers).
        here, pid = Roots(), os.getpid()
        start = process_start(here, pid) or ""
        return cls(tuple(services), runtime, gpu, at, pid, start, read_boot_id(here))

    def when(self) -> str:
        return datetime.fromtimestamp(self.at).astimezone().isoformat(sep=" ", timespec="seconds")

    def stopped(self) -> str:
        return ", ".join(self.services)

    def running(self, roots: Roots) -> bool:
        """Whether the process that wrote the record still runs (on this boot)."""
        boot = read_boot_id(roots)
        if self.boot_id and boot and boot != self.boot_id:
            return False
        start = process_start(roots, self.pid)
        return start is not None and (not self.pid_start or start == self.pid_start)


class UnreadableRecord(ValueError):
    """A record that is there but says nothing MAC can use (edited by hand, another
    release's): what it stood for is unknown, so it is treated as a reset that ended."""


def record_path(cfg: NodeConfig, roots: Roots | None = None) -> Path:
    """Where the record is: the state dir as root has it (`mac gpu reset` runs as root
    only; `mac doctor` and sys-manager may run as another user), or MAC_STATE_DIR; read
    under ``roots`` where given (sys-manager in a container has the host's / elsewhere).

    A user whose own agent runs (process runtime, state in ~/.mac/state/<host>) has it
    reset by root through the command `sudo mac gpu reset` names for it (MAC_STATE_DIR
    set to that folder: maccli.agent.sudo_owner), which records there: where that
    user's folder holds a record, that user's `mac doctor` and `mac restart agent` read
    and clear that one."""
    explicit = cfg.value("MAC_STATE_DIR")
    path = Path(explicit or DEFAULT_STATE_DIR_ROOT) / RECORD_NAME
    if not explicit:
        own = cfg.state_dir / RECORD_NAME
        if own != path and _is_file(roots.host(str(own)) if roots is not None else own):
            path = own
    return roots.host(str(path)) if roots is not None else path


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a folder this user cannot look into holds none of its records
        return False


def lock_path(cfg: NodeConfig) -> Path:
    """The lock a running `mac gpu reset` holds (maccli.gpureset), beside the record."""
    return record_path(cfg).with_name(LOCK_NAME)


def write_record(cfg: NodeConfig, record: ResetRecord) -> Path:
    """Write it atomically (a power cut leaves the old file or the new, never half)."""
    path = record_path(cfg)
    body = json.dumps({**asdict(record), "services": list(record.services)}, indent=1) + "\n"
    # Readable by all: `mac doctor` as any user, nothing secret in it.
    write_atomically(path, body.encode(), mode=0o644)
    return path


def read_record(cfg: NodeConfig, roots: Roots | None = None) -> ResetRecord | None:
    """The record (under ``roots`` where given, as record_path), None where there is
    none; UnreadableRecord where it makes no sense."""
    path = record_path(cfg, roots)
    text = read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
        return ResetRecord(
            services=tuple(str(name) for name in data["services"]),
            runtime=str(data["runtime"]),
            gpu=str(data["gpu"]),
            at=float(data["at"]),
            pid=int(data["pid"]),
            pid_start=str(data.get("pid_start", "")),
            boot_id=str(data.get("boot_id", "")),
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise UnreadableRecord(f"{path} is not a record of `mac gpu reset`: {exc}") from exc


def remove_record(cfg: NodeConfig) -> None:
    record_path(cfg).unlink(missing_ok=True)


def process_start(roots: Roots, pid: int) -> str | None:
    """The start time of a process (field 22 of /proc/<pid>/stat, in clock ticks since
    boot), None where there is no such process."""
    text = read_text(roots.proc(str(pid), "stat"))
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()  # the name in (...) may hold spaces
    return fields[19] if len(fields) > 19 else ""


def check_gpu_reset(ctx: CheckContext) -> CheckResult:
    cfg = config(ctx)
    try:
        # The host's file and the host's /proc (record.running): in sys-manager's
        # container they are under /host/root and /host/proc.
        record = read_record(cfg, ctx.roots)
    except UnreadableRecord as exc:
        return CheckResult(
            CHECK_ID, TITLE, CheckStatus.WARN,
            f"{exc}. Whatever `mac gpu reset` stopped, `mac restart agent` starts every "
            "agent service again and removes it.",
            steps=(RESTART_AGENT,),
        )  # fmt: skip
    if record is None:
        return CheckResult(CHECK_ID, TITLE, CheckStatus.PASS, "no reset left unfinished.")
    if record.running(ctx.roots):
        # A warning, not a pass: while it runs the node has no GPU exporter (its
        # service check fails, its metrics stop), and this says why and for how long.
        return CheckResult(
            CHECK_ID, TITLE, CheckStatus.WARN,
            f"`mac gpu reset` (pid {record.pid}) is resetting {record.gpu}: it stopped "
            f"{record.stopped()} at {record.when()} and starts them again when it ends. "
            "Leave the agent alone meanwhile (no `mac restart agent`).",
            f"ps -o pid,etime,args -p {record.pid}   # the reset, still running",
        )  # fmt: skip
    return CheckResult(
        CHECK_ID, TITLE, CheckStatus.FAIL,
        f"`mac gpu reset` stopped {record.stopped()} at {record.when()} and did not start "
        f"them again (its process, pid {record.pid}, ended without finishing: killed, or "
        f"the host lost power; it was resetting {record.gpu}). The node's GPU verdict on "
        "the master is stale until they run.",
        steps=(RESTART_AGENT,),
    )  # fmt: skip


CHECKS = (check_gpu_reset,)
