"""`mac gpu reset <gpu>`: the `reset_gpu` repair (docs/gpu-health.md) as one command.

The vendor's reset refuses while any process holds the GPU, and MAC's own services do:
the GPU exporter and mango-sdk-agent, which reads the GPUs through the same libraries
(NVML, amdsmi: exporters.mango). So the command stops only those that run (never `mac stop
agent`, which deregisters the node), resets the GPU, starts them again and says what is
left to do. A reset that fails, Ctrl-C, SIGTERM or SIGHUP (the ssh session dropped)
start them again all the same, and so does a reset stuck in the kernel once
RESET_TIMEOUT has passed (node.runner leaves it behind). Only a SIGKILL (the OOM killer,
a power cut) can leave them stopped, so before stopping them it records what it stops
(node.checks.gpu_reset, removed once they run again): `mac doctor` then says so with its
fix, the next `mac gpu reset` starts them first, and `mac start|restart agent` clears it.
One reset runs at a time: each holds a lock beside the record (LOCK_NAME) for the whole
command, and a second one refuses before it stops anything, or the first to end would
start the services under the other's reset.

Once a reset went through, its services still stopped, it drops what the GPU exporters
keep of that GPU across their restarts (node.gpu.evidence_state.forget_reset_gpu: the ECC
and NVLink rises), so the exporter it starts again judges the repaired GPU afresh.

Once NVIDIA's reset went through, it writes the reset into the kernel log
(node.gpu.kernel_log.mark_reset): the dcgm-exporter it starts again reads the log back
from the boot on, and would otherwise judge the GPU on the XIDs it logged before the
reset, unhealthy again until MAC_GPU_EVIDENCE_WINDOW has passed (those a reset repairs:
an XID that asks for a reboot or a look at the hardware stays).

Under `sudo`, where root has no agent and the user who ran it has one, it stops before
anything and names that agent with the command that resets with it
(maccli.agent.sudo_owner).

An AMD GPU is named by its index only: `amd-smi list --json`'s output was not at hand
from a real node to parse its bus ids and UUIDs from, so the index is checked against
the GPUs the node's own discovery counts (node.hardware), as the registration does.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from os import geteuid
from pathlib import Path

from contract.verdicts import is_nvidia_uuid
from maccli import output
from maccli.agent import sudo_owner
from maccli.agent.hardware import gpus
from maccli.agent.specs import GPU_SERVICES, ROLE, gpu_state_dir, runtime_and_specs
from maccli.output import CliError, print_states
from maccli.runtimes import Runtime, ServiceSpec, ServiceState
from node.checks import gpu_reset as records
from node.config import NodeConfig
from node.gpu import evidence_state, kernel_log
from node.runner import CommandResult, run_command

# Beside the vendor's GPU exporter (maccli.agent.specs.GPU_SERVICES), the agent service
# that keeps the GPUs open once asked: the inventory API.
INVENTORY_SERVICE = "mango-sdk-agent"
QUERY_TIMEOUT = 30.0  # seconds: nvidia-smi takes a few where persistence mode is off
RESET_TIMEOUT = 300.0  # seconds: a reset waits for the GPU to come back


@dataclass(frozen=True)
class Gpu:
    """One GPU of this node, as its vendor's tool numbers and names it."""

    index: int
    bus_id: str = ""  # nvidia-smi's `00000000:3B:00.0`
    uuid: str = ""

    def __str__(self) -> str:
        named = ", ".join(part for part in (self.bus_id, self.uuid) if part)
        return f"GPU {self.index} ({named})" if named else f"GPU {self.index}"


@dataclass(frozen=True)
class Tool:
    """A vendor's command-line tool: how it resets a GPU and what installs it."""

    vendor: str  # as node.hardware.detect_gpus names it
    program: str
    reset: tuple[str, ...]  # the arguments before the GPU's index
    holders: str  # who else holds the GPUs open: the command that lists them
    install: list[str]
    # What it prints where the reset failed although it exits 0.
    failed_words: tuple[str, ...] = ()

    def reset_argv(self, gpu: Gpu) -> list[str]:
        return [self.program, *self.reset, str(gpu.index)]

    def failed(self, done: CommandResult) -> bool:
        return done.returncode != 0 or any(word in done.stdout for word in self.failed_words)


TOOLS = {
    "nvidia": Tool(
        "nvidia",
        "nvidia-smi",
        ("-r", "-i"),
        "sudo fuser -v /dev/nvidia*",
        # It comes with the driver's utilities, of the driver's branch (Ubuntu's package).
        ["cat /proc/driver/nvidia/version", "sudo apt-get install nvidia-utils-<branch>"],
    ),
    "amd": Tool(
        "amd",
        "amd-smi",
        ("reset", "--gpureset", "-g"),
        "sudo fuser -v /dev/kfd /dev/dri/*",
        ["sudo apt-get install amd-smi-lib"],
        # amdsmi_cli/amdsmi_commands.py's reset: it reports a failure, and exits 0.
        ("Failed to reset GPU", "Unable to reset"),
    ),
}


def parse_nvidia_gpus(text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader`, one GPU a line."""
    found = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            found.append(Gpu(int(fields[0]), fields[1], fields[2]))
    return found


def is_named(gpu: Gpu, asked: str) -> bool:
    """Whether `asked` names `gpu`: its index, its UUID (any case) or its PCI bus id in
    either form (`00000000:3B:00.0`, `0000:3b:00.0`)."""
    asked = asked.strip()
    if asked.isdigit():
        return int(asked) == gpu.index
    if gpu.uuid and asked.lower() == gpu.uuid.lower():
        return True
    address = kernel_log.pci_address(asked)
    return address is not None and address == kernel_log.pci_address(gpu.bus_id)


def _listed(found: list[Gpu]) -> str:
    return "\n".join(f"  {gpu}" for gpu in found) or "  (none)"


def find_gpu(tool: Tool, asked: str, count: int) -> Gpu:
    """The GPU that `asked` names, by its vendor's tool; a CliError listing them all where
    none is."""
    if tool.vendor == "amd":
        found, source, names = [Gpu(i) for i in range(count)], "its amdgpu cards", "index"
        if not asked.strip().isdigit():
            raise CliError(
                f"{asked!r} is not a GPU index: on an AMD node, mac gpu reset takes the "
                "GPU's index (amd-smi list shows each one's index beside its BDF and UUID).",
                hint=f"This node's GPUs ({source}):\n{_listed(found)}",
                commands=["amd-smi list", "sudo mac gpu reset <index>"],
            )
    else:
        found = parse_nvidia_gpus(_query(tool).stdout)
        source, names = tool.program, "index, UUID or PCI bus id"
    for gpu in found:
        if is_named(gpu, asked):
            return gpu
    raise CliError(
        f"this node has no GPU {asked!r}.",
        hint=f"Its GPUs ({source}):\n{_listed(found)}\nName one by its {names}:",
        commands=["sudo mac gpu reset <index>"],
    )


def _query(tool: Tool) -> CommandResult:
    argv = [tool.program, "--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader"]
    done = run_command(argv, timeout=QUERY_TIMEOUT)
    if done.returncode != 0:
        raise CliError(
            f"{shlex.join(argv)} failed (exit code {done.returncode}): {_words(done)}",
            hint="It cannot reach the driver, and a GPU reset cannot help then: reboot the "
            "node (a driver/library version mismatch after an upgrade needs one too):",
            commands=["nvidia-smi", "sudo reboot"],
        )
    return done


def _words(done: CommandResult) -> str:
    return " ".join(f"{done.stdout} {done.stderr}".split()) or f"exit code {done.returncode}"


def _tool(cfg: NodeConfig) -> tuple[Tool, int]:
    """This node's vendor's tool (the GPUs its discovery finds, as the registration and
    the agent's Docker profile have them), and how many GPUs that discovery counts."""
    vendor, count = gpus(cfg)
    tool = TOOLS.get(vendor)
    if tool is None:
        raise CliError(
            "this node has no NVIDIA or AMD GPU that MAC can see (no /dev/nvidia*, no "
            "amdgpu card under /sys/class/drm): there is nothing to reset.",
            commands=["mac doctor"],
        )
    if shutil.which(tool.program) is None:
        raise CliError(
            f"{tool.program} is not installed here, and the reset needs it.",
            hint=f"It comes with the {vendor.upper()} driver's tools; install them:",
            commands=tool.install,
        )
    return tool, count


def gpu_holders(specs: list[ServiceSpec], vendor: str) -> list[ServiceSpec]:
    """The agent services that keep the vendor's GPUs open while they run."""
    return [spec for spec in specs if spec.name in {GPU_SERVICES[vendor], INVENTORY_SERVICE}]


def slurm_node(cfg: NodeConfig) -> str | None:
    """This node's NodeName in Slurm where it has Slurm's tools: MAC's default mapping,
    its name up to the first dot (the master's MAC_SLURM_NODE_MAP may say otherwise)."""
    if not (shutil.which("slurmd") or shutil.which("scontrol")):
        return None
    return cfg.node_name()[0].split(".", 1)[0] or "<node>"


def reset(asked: str, runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    tool, count = _tool(cfg)
    gpu = find_gpu(tool, asked, count)
    if geteuid() != 0:
        raise CliError(
            f"resetting {gpu} needs root ({tool.program} refuses otherwise).",
            commands=[f"sudo mac gpu reset {shlex.quote(asked)}"],
        )
    _refuse_to_miss_the_users_agent(cfg, asked)
    runtime, specs = runtime_and_specs(cfg, runtime_name)
    with _one_reset_at_a_time(cfg, asked):
        return _reset(cfg, tool, gpu, asked, runtime, specs)


def _refuse_to_miss_the_users_agent(cfg: NodeConfig, asked: str) -> None:
    """Under `sudo`, where root has no agent here and the user who ran it has one
    (maccli.agent.sudo_owner): stop before anything, naming that agent and the command
    that resets with it, rather than stop nothing and fail on its exporter."""
    owner = sudo_owner.invoking_users_agent(cfg)
    if owner is None:
        return
    theirs = (
        f"sudo env MAC_STATE_DIR={shlex.quote(str(owner.state_dir))} "
        f"MAC_USER_ENV_FILE={shlex.quote(str(owner.user_file))} mac gpu reset {shlex.quote(asked)}"
    )
    raise CliError(
        f"root has no MAC agent here, and {owner.user} has one (state {owner.state_dir}): "
        f"as root, this command would stop none of {owner.user}'s GPU services, and the "
        "reset would fail on them. Nothing was stopped.",
        hint=f"Reset with {owner.user}'s agent by naming its folder and settings file (root "
        f"then acts on {owner.user}'s settings):",
        commands=[theirs],
    )


def _reset(
    cfg: NodeConfig, tool: Tool, gpu: Gpu, asked: str, runtime: Runtime, specs: list[ServiceSpec]
) -> int:
    _finish_interrupted(cfg, asked)
    holders = _running(runtime, gpu_holders(specs, tool.vendor))
    argv = tool.reset_argv(gpu)
    if not holders:
        output.say(f"None of MAC's services that hold the GPUs open runs ({runtime.name} runtime).")
    # Whatever ends the command (an error, Ctrl-C, the terminal closing, a kill), the
    # services it stopped start again: a node left without its GPU exporter keeps its
    # last verdict on the master for as long as nobody notices. What no `finally` sees
    # (SIGKILL) the record tells.
    with _signals_as_exit():
        done = None
        try:
            _record(cfg, runtime, holders, gpu)
            _stop(runtime, holders)
            output.say(f"Resetting {gpu}: {shlex.join(argv)}")
            done = run_command(argv, timeout=RESET_TIMEOUT)
            if not tool.failed(done):
                for line in f"{done.stdout}\n{done.stderr}".strip().splitlines():
                    output.say(f"  | {line}".rstrip())
                if tool.vendor == "nvidia":
                    _mark_reset(cfg, gpu, shlex.join(argv))
                _forget_evidence(cfg, gpu)
        finally:
            back = _start_again(runtime, holders)
            if back and holders:
                # Kept where they did not come back: `mac doctor` goes on saying so.
                records.remove_record(cfg)
    if tool.failed(done):
        raise _reset_failed(cfg, tool, argv, done, asked, back)
    if not back:
        raise CliError(
            f"{gpu} was reset, but MAC's GPU services did not start again (above).",
            commands=["mac restart agent", "mac status"],
        )
    print_states(runtime.status(ROLE, specs), f"Agent services ({runtime.name} runtime)")
    _next_steps(cfg, gpu)
    return 0


def _running(runtime: Runtime, holders: list[ServiceSpec]) -> list[ServiceSpec]:
    """Those running now: only they are stopped, and so started again (one an operator
    stopped on purpose stays stopped)."""
    if not holders:
        return []
    running = {state.name for state in runtime.status(ROLE, holders) if state.running}
    return [spec for spec in holders if spec.name in running]


@contextmanager
def _signals_as_exit() -> Iterator[None]:
    """SIGHUP (the ssh session dropped) and SIGTERM end the command as Ctrl-C does, through
    its ``finally``s, instead of killing it with MAC's GPU services stopped."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)}

    def leave(number: int, _frame) -> None:
        raise SystemExit(128 + number)

    for sig in previous:
        signal.signal(sig, leave)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _one_reset_at_a_time(cfg: NodeConfig, asked: str) -> Iterator[None]:
    """Hold the reset lock (records.lock_path) for the whole command; refuse, before
    anything stops, while another reset holds it. The kernel releases a flock when its
    holder ends, however it ends (SIGKILL too): no stale lock to clear by hand."""
    path = records.lock_path(cfg)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Never through a link: root truncates it, in a folder MAC_STATE_DIR may move.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        handle = os.fdopen(fd, "r+", encoding="utf-8")
    except OSError as exc:
        output.warn(
            f"could not open the reset lock {path} ({exc.strerror or exc}): nothing stops "
            "a second `mac gpu reset` from running beside this one."
        )
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _another_reset(cfg, path, asked) from None
        handle.truncate(0)  # its pid, for the one refused
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield


def _another_reset(cfg: NodeConfig, path: Path, asked: str) -> CliError:
    """The refusal of a second reset: who holds the lock, by the pid the holder wrote
    into it; the record names its GPU only if it is that process's (the record of a reset
    killed earlier stays until the holder has started its services again)."""
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):  # read between the holder's truncate and its write
        pid = None
    try:
        record = records.read_record(cfg)
    except records.UnreadableRecord:
        record = None
    if record is not None and record.pid != pid:
        record = None
    doing = f"is resetting {record.gpu}" if record else "is running"
    who = f"(pid {pid})" if pid else f"(it holds {path})"
    return CliError(
        f"another `mac gpu reset` {who} {doing}: one reset at a time, or the first "
        "to end would start MAC's GPU services under the other's reset. Nothing was stopped.",
        hint="Wait for it to end (it starts them again), then run this one:",
        commands=[
            *([f"ps -o pid,etime,args -p {pid}"] if pid else []),
            f"sudo mac gpu reset {shlex.quote(asked)}",
        ],
    )


def _finish_interrupted(cfg: NodeConfig, asked: str) -> None:
    """Start what an earlier reset stopped and did not start again (it was killed hard),
    before this one looks at what runs; refuse while another reset is still running.

    Starting them rather than refusing with the command to run: it is exactly what that
    run owed, the operator is here for the same repair, and this run stops again those
    of them that hold the GPUs (and records that), so nothing is left to chance."""
    again = f"sudo mac gpu reset {shlex.quote(asked)}"
    try:
        record = records.read_record(cfg)
    except records.UnreadableRecord as exc:
        raise CliError(
            f"{exc}; what the reset it stands for stopped is unknown.",
            hint="Start every agent service again (that removes it), then reset:",
            commands=["mac restart agent", again],
        ) from exc
    if record is None:
        return
    if record.running(cfg.roots()):
        raise CliError(
            f"another `mac gpu reset` (pid {record.pid}) is resetting {record.gpu}: it "
            f"stopped {record.stopped()} at {record.when()}. Two at once would start MAC's "
            "GPU services under each other's reset.",
            hint="Wait for it to end (it starts them again), then run this one:",
            commands=[f"ps -o pid,etime,args -p {record.pid}", again],
        )
    output.warn(
        f"`mac gpu reset` stopped {record.stopped()} at {record.when()} and did not start "
        f"them again (pid {record.pid} ended while resetting {record.gpu}): starting them "
        "first."
    )
    runtime, specs = runtime_and_specs(cfg, record.runtime)
    if not _start_again(runtime, [spec for spec in specs if spec.name in record.services]):
        raise CliError(
            f"{record.stopped()} did not start again (above), so the reset waits.",
            commands=["mac restart agent", "mac status", again],
        )
    records.remove_record(cfg)


def _record(cfg: NodeConfig, runtime: Runtime, holders: list[ServiceSpec], gpu: Gpu) -> None:
    """Record what is about to stop (node.checks.gpu_reset) for when no `finally` runs.
    One that cannot be written is warned of, not fatal: the repair matters more."""
    if not holders:
        return
    record = records.ResetRecord.of_this_process(
        [spec.name for spec in holders], runtime.name, str(gpu), time.time()
    )
    try:
        records.write_record(cfg, record)
    except OSError as exc:
        output.warn(
            f"could not record the reset in {records.record_path(cfg)} "
            f"({exc.strerror or exc}): should this command be killed hard, nothing will say "
            "that MAC's GPU services are stopped; `mac restart agent` brings them back."
        )


def forget_finished_reset(cfg: NodeConfig, states: list[ServiceState]) -> None:
    """`mac start|restart agent`: the record of a reset killed before it started the
    services again goes once they run (one still running keeps its own)."""
    try:
        record = records.read_record(cfg)
    except records.UnreadableRecord:
        record = None  # nothing to wait for: every service was just started
    else:
        if record is None or record.running(cfg.roots()):
            return
        ours = {state.name: state.running for state in states}
        if not all(ours.get(name, True) for name in record.services):
            return  # still stopped: `mac doctor` goes on saying so
    try:
        records.remove_record(cfg)
    except OSError as exc:  # a root reset's record, `mac` run by a docker group user
        path = records.record_path(cfg)
        output.warn(
            f"could not remove {path}, the record of an unfinished `mac gpu reset` "
            f"({exc.strerror or exc}): `mac doctor` goes on saying that it left MAC's GPU "
            f"services stopped. Clear it with: sudo mac restart agent (or sudo rm {path})"
        )
        return
    if record is not None:
        output.say(
            f"{record.stopped()}, which an unfinished `mac gpu reset` (pid {record.pid}) "
            f"stopped at {record.when()}, run again."
        )


def _stop(runtime: Runtime, holders: list[ServiceSpec]) -> None:
    if not holders:
        return
    names = ", ".join(spec.name for spec in holders)
    hold, them = ("holds", "it") if len(holders) == 1 else ("hold", "them")
    output.say(
        f"{names} {hold} the GPUs open: stopping {them} for the reset (the node stays registered)."
    )
    stopped = [state.name for state in runtime.stop_services(ROLE, holders)]
    others = [name for name in stopped if name not in {spec.name for spec in holders}]
    if others:
        output.say(
            f"Stopped with them: {', '.join(others)} (one process serves them all, "
            "MAC_AGENT_BUNDLE); back with them after the reset."
        )


def _start_again(runtime: Runtime, holders: list[ServiceSpec]) -> bool:
    """Start again what was stopped; whether they came back (a failure is warned of, the
    command's own error being the one to tell)."""
    if not holders:
        return True
    output.say(f"Starting {', '.join(spec.name for spec in holders)} again.")
    try:
        runtime.start_services(ROLE, holders)
    except CliError as exc:
        output.warn(f"{exc.message} Bring every agent service back with: mac restart agent")
        return False
    return True


def _reset_failed(
    cfg: NodeConfig, tool: Tool, argv: list[str], done: CommandResult, asked: str, back: bool
) -> CliError:
    node = slurm_node(cfg)
    reboot = f"scontrol reboot ASAP nextstate=RESUME {node}" if node else "sudo reboot"
    return CliError(
        f"{shlex.join(argv)} failed (exit code {done.returncode}): {_words(done)}",
        hint=("MAC's GPU services are running again. " if back else "")
        + f"{tool.program} refuses while any process holds the GPU: list them, end them (a "
        "job, another monitoring agent), and try again; a reset that fails with nothing "
        "holding the GPU needs a reboot"
        + (" (Slurm reboots the node once it is empty, and resumes it):" if node else ":"),
        commands=[tool.holders, f"sudo mac gpu reset {shlex.quote(asked)}", reboot],
    )


def _mark_reset(cfg: NodeConfig, gpu: Gpu, how: str) -> None:
    """The reset in the kernel log, so that dcgm-exporter does not read the GPU's earlier
    XIDs back as if they were still unrepaired."""
    path = cfg.roots().dev("kmsg")
    pci = kernel_log.pci_address(gpu.bus_id)
    if pci is None:
        _unrecorded(cfg, gpu, f"{gpu.bus_id!r} is not a PCI bus id")
        return
    try:
        kernel_log.mark_reset(path, pci, how)
    except OSError as exc:
        _unrecorded(cfg, gpu, f"{path}: {exc.strerror or exc}")
        return
    output.say(f"Recorded the reset in the kernel log ({path}): its earlier XIDs are repaired.")


def _forget_evidence(cfg: NodeConfig, gpu: Gpu) -> None:
    """Drop what the GPU exporters keep of the reset GPU (node.gpu.evidence_state), while
    they are stopped: by its UUID where it is NVML's own form, else by its index (AMD).
    Its problems are warned of: the reset is done, and a file left as it was costs at
    most a verdict until its window ends."""
    folder = Path(gpu_state_dir(cfg))
    uuid = gpu.uuid if is_nvidia_uuid(gpu.uuid) else ""
    changed, problems = evidence_state.forget_reset_gpu(folder, gpu.index, uuid)
    if changed:
        output.say(f"Cleared the evidence its exporter kept of {gpu}: {', '.join(changed)}")
    for problem in problems:
        output.warn(f"the evidence kept of {gpu} may judge it again: {problem}")


def _unrecorded(cfg: NodeConfig, gpu: Gpu, why: str) -> None:
    window = cfg.value("MAC_GPU_EVIDENCE_WINDOW")
    output.warn(
        f"the reset is not in the kernel log ({why}). dcgm-exporter reads the XIDs {gpu} "
        "logged before it back from there and judges it unhealthy again until "
        f"MAC_GPU_EVIDENCE_WINDOW ({window:g} s) has passed since the last of them."
    )


def _next_steps(cfg: NodeConfig, gpu: Gpu) -> None:
    output.ok(f"{gpu} was reset; the node stays registered.")
    output.say(
        "Its verdict shows on the node's page, and in `mac status --json` (the master's "
        "gpus), within a sweep (30 s by default)."
    )
    node = slurm_node(cfg)
    if node:
        output.say(
            "MAC does not resume a node it drained for a repair without a reboot "
            "(docs/slurm.md, Resuming after a repair): once the node's page shows every GPU "
            "healthy, resume it:"
        )
        output.say(f"  scontrol update NodeName={node} State=RESUME", "cyan")
