"""The agent's network mode (MAC_AGENT_NETWORK): which one a command uses, and why.

host (the default for new installs) puts every exporter on the host network, so
nothing depends on net.ipv4.ip_forward and node_exporter sees the node's own
interfaces; bridge is the troubleshooting guide's layout, the exporters behind
published ports with nic-exporter alone on the host. The process runtime runs
host processes: it is host by nature, whatever the setting says.

Under Docker, `mac start agent` takes the first that applies:

1. `--network host|bridge` on the command line;
2. MAC_AGENT_NETWORK (environment, per-node file, per-user file);
3. the agent's containers already here: bridge ones are an install from before the
   mode existed, which keeps bridge (an upgrade never moves a node by itself);
4. a node key with no mode written beside it: a node registered by an older `mac`,
   whose Docker agent could only run bridge;
5. otherwise a new install: host.

Under the process runtime the mode is host; a start with nothing configured writes
host, so that a later move of the node to Docker keeps it.

A flag, and a choice made by 3-5, are written to the per-node file, as the node key
is, so that the next start, `mac restart agent` and `mac status` find the same mode
and `mac env list` shows it. The mode is reported at registration; a change of mode
therefore goes through `mac start agent`, and `mac restart agent` keeps the mode
its containers run in.
"""

from __future__ import annotations

from contract import settings
from contract.services import AgentNetwork
from maccli import output
from maccli.output import CliError
from maccli.runtimes import Runtime, ServiceSpec
from node.config import ConfigError, NodeConfig, Source
from node.envfile import write_env_file

NETWORK_KEY = "MAC_AGENT_NETWORK"
REASSERT_KEY = "MAC_IPFORWARD_REASSERT"
# The bind options of the host's / in sys-exporter's container (host mode's overlay).
ROOTFS_KEY = "MAC_ROOTFS_OPTIONS"


def root_propagates(mountinfo: str) -> bool:
    """Whether / is a shared or slave mount in this mountinfo text (proc(5)).

    Docker refuses an rslave bind of / otherwise ("path / is mounted on / but it is
    not a shared or slave mount"): a host booted by systemd has it shared, a host or
    container that never made it so has it private.
    """
    fields: list[str] = []
    for line in mountinfo.splitlines():
        parts = line.split()
        if len(parts) > 6 and parts[4] == "/":
            fields = parts[6 : parts.index("-")]  # the last mount on / is the one seen
    return any(f.startswith(("shared:", "master:")) for f in fields)


def prepare_rootfs_mount(cfg: NodeConfig, runtime: Runtime) -> None:
    """Host mode: give sys-exporter the host's / with rslave where Docker allows it, else
    read-only without propagation (MAC_ROOTFS_OPTIONS=ro), and say what that costs."""
    if cfg.get(ROOTFS_KEY) is not None:
        return  # the operator's choice (environment or env files)
    mountinfo = cfg.roots().proc("self", "mountinfo")
    try:
        propagates = root_propagates(mountinfo.read_text())
    except OSError:
        return
    if not propagates:
        runtime.pass_values({ROOTFS_KEY: "ro"})
        output.warn(
            "/ is a private mount here, so sys-exporter gets the host's / read-only without "
            "mount propagation: file systems mounted later show in its figures after "
            "`mac restart agent`. To have them at once, make / shared (as systemd does at "
            "boot): sudo mount --make-rshared /"
        )


def parse_network(value: str, where: str = NETWORK_KEY) -> AgentNetwork:
    """`value` as a mode (the setting's declaration); ConfigError naming `where` and the
    allowed values otherwise."""
    try:
        return settings.setting(NETWORK_KEY).kind.parse(where, value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def configured_network(cfg: NodeConfig) -> AgentNetwork | None:
    """MAC_AGENT_NETWORK as the configuration sets it; None when nothing does."""
    value = cfg.get(NETWORK_KEY)
    if value is None:
        return None
    try:
        return parse_network(value)
    except ConfigError as exc:
        source = cfg.source_of(NETWORK_KEY)
        where = "the environment" if source == Source.PROCESS else str(source)
        raise CliError(
            f"{exc} (set in {where})",
            hint="Set a valid mode and run again:",
            commands=[f"mac env set {NETWORK_KEY}=host", "mac start agent"],
        ) from None


def reported_network(runtime: Runtime) -> AgentNetwork:
    """The mode the master is told: the runtime's own, host where it has none."""
    return runtime.network or AgentNetwork.HOST


def choose_for_start(
    cfg: NodeConfig, runtime: Runtime, specs: list[ServiceSpec], flag: str | None
) -> AgentNetwork:
    """The mode `mac start agent` runs in (see the module's rules), set on the runtime
    and remembered in the per-node file when the flag or this start chose it."""
    wanted = parse_network(flag, "--network") if flag else None
    if AgentNetwork.BRIDGE not in runtime.network_modes:
        return _process_mode(cfg, wanted)
    running = runtime.running_network(specs)
    chosen, why = _docker_mode(cfg, wanted, running)
    runtime.use_network(chosen, running)
    if chosen == AgentNetwork.HOST:
        prepare_rootfs_mount(cfg, runtime)
    elif cfg.value(REASSERT_KEY):
        output.warn(
            f"{REASSERT_KEY}=1 does nothing in bridge mode: sys-manager has a network "
            "namespace of its own there, whose ip_forward is not the node's. It works in "
            "host mode: sudo mac start agent --network host"
        )
    if why:
        _remember(cfg, chosen, why)
    if running is not None and running != chosen:
        output.say(
            f"Switching the agent from {running} to {chosen} network mode: its containers "
            "are recreated, and the master is told at registration."
        )
    return chosen


def _docker_mode(
    cfg: NodeConfig, wanted: AgentNetwork | None, running: AgentNetwork | None
) -> tuple[AgentNetwork, str]:
    """(the mode, why it is written to the per-node file; '' when it is not)."""
    configured = configured_network(cfg)
    if wanted is not None:
        if cfg.source_of(NETWORK_KEY) == Source.PROCESS and configured != wanted:
            output.warn(
                f"{NETWORK_KEY}={configured} in the environment wins over the saved "
                f"--network {wanted} at the next start."
            )
        return wanted, "given with --network"
    if configured is not None:
        return configured, ""
    if running is not None:
        return running, f"the agent's containers already run in {running} mode"
    if cfg.node_key:
        return AgentNetwork.BRIDGE, (
            "this node was registered by an earlier mac, whose Docker agent ran bridge"
        )
    return AgentNetwork.HOST, "the default for a new install"


def _process_mode(cfg: NodeConfig, wanted: AgentNetwork | None) -> AgentNetwork:
    """The process runtime's services are host processes: host, and bridge is refused."""
    if wanted == AgentNetwork.BRIDGE:
        raise CliError(
            "--network bridge needs the docker runtime: the process runtime runs every "
            "exporter as a process on the host network.",
            hint="Run the agent under Docker in bridge mode, or in host mode as processes:",
            commands=["mac start agent --runtime docker --network bridge", "mac start agent"],
        )
    configured = configured_network(cfg)
    if wanted == AgentNetwork.HOST:
        _remember(cfg, AgentNetwork.HOST, "given with --network")
    elif configured is None:
        _remember(cfg, AgentNetwork.HOST, "the process runtime runs host processes")
    elif configured == AgentNetwork.BRIDGE:
        output.warn(
            f"{NETWORK_KEY}=bridge applies to the docker runtime only: the process runtime "
            "runs every exporter on the host network (reported as host)."
        )
    return AgentNetwork.HOST


def _remember(cfg: NodeConfig, mode: AgentNetwork, why: str) -> None:
    if cfg.node_values.get(NETWORK_KEY) == mode:
        return
    write_env_file(cfg.node_file, {NETWORK_KEY: mode.value})
    output.say(f"Network mode {mode}: {why}. Saved {NETWORK_KEY}={mode} to {cfg.node_file}.")


def choose_for_running(
    cfg: NodeConfig, runtime: Runtime, specs: list[ServiceSpec], *, restart: bool = False
) -> AgentNetwork:
    """The mode of stop, status and restart: the one the containers run in, else the
    configured one. Nothing is written; a restart never switches modes."""
    if AgentNetwork.BRIDGE not in runtime.network_modes:
        return AgentNetwork.HOST
    running = runtime.running_network(specs)
    try:
        configured = configured_network(cfg)
    except CliError:
        if restart:
            raise
        # A typo in the setting must not keep `mac stop agent` from deregistering.
        output.warn(f"{NETWORK_KEY}={cfg.get(NETWORK_KEY)!r} is not host or bridge; ignored.")
        configured = None
    mode = running or configured or (AgentNetwork.BRIDGE if cfg.node_key else AgentNetwork.HOST)
    if restart and running is not None and configured is not None and configured != running:
        output.warn(
            f"{NETWORK_KEY}={configured}, but the agent runs in {running} mode; a restart "
            f"keeps {running}. To switch (the master is told at registration): "
            f"sudo mac start agent --network {configured}"
        )
    runtime.use_network(mode, running)
    if restart and mode == AgentNetwork.HOST:
        prepare_rootfs_mount(cfg, runtime)
    return mode
