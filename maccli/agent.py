"""`mac start|stop|restart|status agent`: the node's services and its registration.

Join (flow 1): MASTER_IP, the master's /health, the services, then a synchronous
POST /api/v1/register whose per-node key is kept in the root-only per-node file.
Leave (flow 8): deregister first, then stop; a master that does not answer leaves
the node registered, and `mac` says so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from contract import __version__
from contract.master_api import MasterClient, Reply, route_address
from contract.services import SERVICES
from exporters.checks.gpu import detect_gpus
from exporters.envfile import write_env_file
from exporters.nodeconfig import (
    NODE_KEY,
    SECRET_KEYS,
    ConfigError,
    NodeConfig,
    Source,
    valid_hostname,
)
from maccli import output
from maccli.output import CliError
from maccli.runtimes import Runtime, ServiceSpec, ServiceState, choose_runtime
from maccli.runtimes.docker import DockerRuntime

ROLE = "agent"


# --- what runs ----------------------------------------------------------------------------


def agent_specs(cfg: NodeConfig) -> list[ServiceSpec]:
    """The agent services with this node's ports (MAC_<SERVICE>_PORT / MAC_PORT_OFFSET)."""
    bind = cfg.get("MAC_BIND") or "0.0.0.0"
    probe_host = "127.0.0.1" if bind in {"0.0.0.0", "::", ""} else bind
    wanted = {s.strip() for s in (cfg.get("MAC_AGENT_SERVICES") or "").split(",") if s.strip()}
    roots = []
    for key, flag in (
        ("MAC_SYS_ROOT", "--sys-root"),
        ("MAC_PROC_ROOT", "--proc-root"),
        ("MAC_DEV_ROOT", "--dev-root"),
    ):
        if cfg.get(key):
            roots += [flag, cfg.get(key) or ""]
    # The exporters see the files' settings too (BMC address and the like), never the secrets.
    env = {
        key: value
        for key, (value, source) in cfg.merged().items()
        if source in (Source.NODE, Source.USER) and key not in SECRET_KEYS
    }
    specs = []
    for service in SERVICES:
        if wanted and service.name not in wanted:
            continue
        port = cfg.service_port(service.name, service.port)
        argv = [sys.executable, "-m", "exporters", service.name, "--port", str(port)]
        argv += ["--bind", bind, *roots]
        specs.append(
            ServiceSpec(
                service.name,
                argv,
                port=port,
                liveness_path=service.liveness_path,
                env=env,
                ready_timeout=float(cfg.get("MAC_START_TIMEOUT") or 30),
                host=probe_host,
            )
        )
    unknown = wanted - {s.name for s in SERVICES}
    if unknown:
        raise CliError(
            f"MAC_AGENT_SERVICES names unknown services: {', '.join(sorted(unknown))}.",
            hint=f"Known services: {', '.join(s.name for s in SERVICES)}. Fix it with:",
            commands=["mac env unset MAC_AGENT_SERVICES"],
        )
    return specs


GPU_SERVICES = {"nvidia": "dcgm-exporter", "amd": "rocm-exporter"}


def _gpus(cfg: NodeConfig) -> tuple[str, int]:
    return detect_gpus(
        cfg.get("MAC_PROC_ROOT") or "/proc",
        cfg.get("MAC_SYS_ROOT") or "/sys",
        cfg.get("MAC_DEV_ROOT") or "/dev",
    )


def runtime_and_specs(
    cfg: NodeConfig, override: str | None, remove_stale: bool = False
) -> tuple[Runtime, list[ServiceSpec]]:
    """The runtime, and the services it runs here.

    Under Docker a GPU exporter's container needs its vendor's devices, so it runs only
    on nodes with that vendor's GPUs (a Compose profile); as a process it runs anywhere
    and reports the missing backend in a gauge.
    """
    runtime = choose_runtime(cfg, ROLE, override, remove_stale=remove_stale)
    specs = agent_specs(cfg)
    if isinstance(runtime, DockerRuntime):
        # Compose substitutes ${NODE_NAME}, ${MAC_<SERVICE>_PORT}... from its environment:
        # give it the files' values too, as the process runtime gives them to its children.
        for key, value in specs[0].env.items() if specs else ():
            os.environ.setdefault(key, value)
        vendor, _ = _gpus(cfg)
        runtime.profiles = [vendor] if vendor in GPU_SERVICES else []
        keep = GPU_SERVICES.get(vendor)
        specs = [s for s in specs if s.name not in GPU_SERVICES.values() or s.name == keep]
    return runtime, specs


# --- configuration guards -----------------------------------------------------------------


def require_master_ip(cfg: NodeConfig) -> str:
    if not cfg.master_ip:
        raise CliError(
            "MASTER_IP is required.",
            hint="Set it (saved to ~/.mac/env) and run again:",
            commands=[
                "mac env set MASTER_IP=<master-ip>",
                "mac start agent",
                "# on a shared (NFS) home, use the per-node file /etc/mango/mac/env instead:",
                "sudo mac env set --node MASTER_IP=<master-ip>",
            ],
        )
    return cfg.master_ip


def resolve_node_name(cfg: NodeConfig) -> str:
    name, source = cfg.node_name()
    if source == Source.USER:
        shared, why = cfg.shared_home()
        if shared:
            raise CliError(
                f"NODE_NAME={name} is pinned in {cfg.user_file}, which every node reads ({why}); "
                "all nodes would register under one name.",
                hint=f"Remove it (the host name is used), or pin it in the per-node file "
                f"{cfg.node_file}:",
                commands=["mac env unset NODE_NAME", f"sudo mac env set --node NODE_NAME={name}"],
            )
    if not name:
        why = "NODE_NAME is set but empty" if source else "the host name is empty"
        raise CliError(
            f"NODE_NAME is empty ({why}), so this node has no name to register under.",
            hint="Set it explicitly and run again:",
            commands=["mac env set NODE_NAME=<name>", "mac start agent"],
        )
    if not valid_hostname(name):
        raise CliError(
            f"{name!r} is not a valid node name (RFC 1123: letters, digits, hyphens, dots).",
            hint="Set a valid one and run again:",
            commands=["mac env set NODE_NAME=<name>", "mac start agent"],
        )
    return name


def _warn_shared_master_ip(cfg: NodeConfig) -> None:
    if cfg.source_of("MASTER_IP") == Source.USER:
        shared, why = cfg.shared_home()
        if shared:
            output.warn(
                f"MASTER_IP comes from {cfg.user_file}, which every node reads ({why}). "
                f"Per-node values belong in {cfg.node_file}: "
                f"sudo mac env set --node MASTER_IP={cfg.master_ip}"
            )


def _can_write(path: Path) -> bool:
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    probe = path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.access(probe, os.W_OK)


def _require_node_file_writable(cfg: NodeConfig) -> None:
    if not _can_write(cfg.node_file):
        raise CliError(
            f"the node key must be kept in {cfg.node_file}, which only root can write.",
            hint="Run it as root:",
            commands=["sudo mac start agent"],
        )


# --- registration -------------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def list_nics(sys_root: str) -> list[dict]:
    """Physical network interfaces (those with a device link), as the registration wants."""
    nics = []
    base = Path(sys_root, "class/net")
    for iface in sorted(base.iterdir()) if base.is_dir() else []:
        device = iface / "device"
        if iface.name == "lo" or not device.exists():
            continue
        nic: dict = {"name": iface.name, "mac": _read(iface / "address")}
        driver = device / "driver"
        if driver.exists():
            nic["driver"] = driver.resolve().name
        ibdevs = sorted(p.name for p in (device / "infiniband").glob("*"))
        if ibdevs:
            nic["ibdev"] = ibdevs[0]
        speed = _read(iface / "speed")
        if speed.lstrip("-").isdigit() and int(speed) > 0:
            nic["speed_mbps"] = int(speed)
        nics.append(nic)
    return nics


def parse_labels(text: str) -> dict[str, str]:
    labels = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f"MAC_LABELS item {item!r} is not key=value.",
                commands=["mac env set MAC_LABELS=rack=a1,role=gpu"],
            )
        labels[key.strip()] = value.strip()
    return labels


def build_payload(cfg: NodeConfig, hostname: str, ip: str, specs: list[ServiceSpec]) -> dict:
    sys_root = cfg.get("MAC_SYS_ROOT") or "/sys"
    vendor, count = _gpus(cfg)
    etc_root = cfg.get("MAC_ETC_ROOT") or "/etc"
    return {
        "hostname": hostname,
        "ip": ip,
        "gpu_vendor": vendor,
        "gpu_count": count,
        "nics": list_nics(sys_root),
        "exporters": {spec.name: spec.port for spec in specs},
        "agent_version": __version__,
        "machine_id": _read(Path(etc_root, "machine-id"))[:64],
        "labels": parse_labels(cfg.get("MAC_LABELS") or ""),
    }


def _agent_ip(cfg: NodeConfig) -> str:
    explicit = (cfg.get("MAC_AGENT_IP") or "").strip()
    if explicit:
        return explicit
    try:
        return route_address(cfg.master_ip, cfg.master_port)
    except OSError as exc:
        raise CliError(
            f"could not register with master at {cfg.master_ip}: no route to it ({exc}).",
            hint="Check the address and this node's routes:",
            commands=[f"ip route get {cfg.master_ip}", "mac env get MASTER_IP"],
        ) from None


def _client(cfg: NodeConfig, source_ip: str | None = None, timeout: float = 10.0) -> MasterClient:
    return MasterClient(
        cfg.master_url,
        timeout=float(cfg.get("MAC_MASTER_TIMEOUT") or timeout),
        join_token=cfg.join_token,
        node_key=cfg.node_key,
        source_ip=source_ip,
    )


def _health_command(cfg: NodeConfig) -> str:
    return f"curl -m5 -o /dev/null -w '%{{http_code}}\\n' {cfg.master_url}/health"


def check_master(cfg: NodeConfig, client: MasterClient) -> None:
    with output.spinner(f"Checking {cfg.master_url}/health ..."):
        reply = client.health()
    if reply.status == 200:
        return
    if _only_sweeps_failing(reply):
        # The API and its database answer, so registration works; the node will be
        # probed as soon as the master's worker and beat run again.
        output.warn(
            "the master answers, but its sweeps have stopped (worker or beat down); "
            "registering anyway. On the master: mac status master"
        )
        return
    reason = reply.reason()
    if reply.status:
        reason = f"the master answers but is not healthy: {reason}"
    raise CliError(
        f"could not register with master at {cfg.master_ip}: {reason}",
        hint=f"Confirm the API port {cfg.master_port} is open from this node (this should print "
        "200), then run again:",
        commands=[_health_command(cfg), "mac start agent"],
    )


def _only_sweeps_failing(reply: Reply) -> bool:
    body = reply.body if isinstance(reply.body, dict) else {}
    return reply.status == 503 and body.get("failed") == ["sweeps"]


def _registration_error(cfg: NodeConfig, reply: Reply) -> CliError:
    prefix = f"could not register with master at {cfg.master_ip}: "
    if reply.status == 401:
        return CliError(
            prefix + f"{reply.reason()}; the master requires a join token.",
            hint="Put the master's MAC_JOIN_TOKEN in the per-node file and run again:",
            commands=["sudo mac env set --node MAC_JOIN_TOKEN=<token>", "sudo mac start agent"],
        )
    if reply.status == 403:
        return CliError(
            prefix + f"{reply.reason()}; this name is registered from another address and "
            "this node's key does not match.",
            hint="If this really is that node, have an admin reset its node key on the master "
            "(or give this node another NODE_NAME), then run again:",
            commands=["sudo mac env set --node NODE_NAME=<name>", "sudo mac start agent"],
        )
    if reply.status == 429:
        wait = reply.headers.get("retry-after", "a few")
        return CliError(
            prefix + f"{reply.reason()}; the master is busy or full.",
            hint=f"Wait {wait} seconds and run again:",
            commands=["mac start agent"],
        )
    if reply.status == 0:
        return CliError(
            prefix + reply.reason(),
            hint="Confirm the master's API answers from this node, then run again:",
            commands=[_health_command(cfg), "mac start agent"],
        )
    return CliError(
        prefix + reply.reason(),
        hint="Fix what the master names, then run again:",
        commands=["mac env list", "mac start agent"],
    )


def register(cfg: NodeConfig, hostname: str, ip: str, specs: list[ServiceSpec]) -> dict:
    client = _client(cfg, source_ip=ip)
    payload = build_payload(cfg, hostname, ip, specs)
    with output.spinner(f"Registering {hostname} ({ip}) with {cfg.master_url} ..."):
        reply = client.register(payload)
    if not reply.ok or not isinstance(reply.body, dict):
        raise _registration_error(cfg, reply)
    key = reply.body.get("node_key")
    if key:
        write_env_file(cfg.node_file, {NODE_KEY: key})
    return reply.body


# --- commands -----------------------------------------------------------------------------


def print_states(states: list[ServiceState], title: str = "") -> None:
    rows = [
        (
            s.name,
            output.styled(s.state),
            output.styled(s.health) if s.state == "running" else output.styled("-"),
            str(s.port or "-"),
            output.format_duration(s.uptime),
            str(s.pid or "-"),
        )
        for s in states
    ]
    output.table(["SERVICE", "STATE", "HEALTH", "PORT", "UPTIME", "PID"], rows, title=title)


def start(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    master_ip = require_master_ip(cfg)
    _warn_shared_master_ip(cfg)
    hostname = resolve_node_name(cfg)
    _require_node_file_writable(cfg)
    try:
        cfg.master_port  # noqa: B018 (validates MAC_MASTER_PORT before anything starts)
    except ConfigError as exc:
        raise CliError(str(exc), commands=["mac env list"]) from None
    ip = _agent_ip(cfg)
    check_master(cfg, _client(cfg, source_ip=ip, timeout=5))
    runtime, specs = runtime_and_specs(cfg, runtime_name, remove_stale)
    states = runtime.start(ROLE, specs)
    print_states(states, f"Agent services ({runtime.name} runtime)")
    node = register(cfg, hostname, ip, specs)
    state = str(node.get("status", "unknown")).capitalize()
    output.say(
        f"Node {node.get('hostname', hostname)} ({node.get('ip', ip)}) is {state} on the "
        "master; its next probe (every 30 s by default) marks it Online."
    )
    output.ok(f"Registered with master {master_ip}.")
    return 0


def stop(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime, specs = runtime_and_specs(cfg, runtime_name)
    hostname, _ = cfg.node_name()
    problem: CliError | None = None
    deregistered = False
    if not cfg.node_key:
        output.say("This node holds no node key: there is no registration to remove.")
    elif not cfg.master_ip:
        problem = CliError(
            "MASTER_IP is required to deregister; the services were stopped but the node "
            "stays registered.",
            hint="Set it and run again:",
            commands=["mac env set MASTER_IP=<master-ip>", "mac stop agent"],
        )
    else:
        client = _client(cfg, timeout=5)
        with output.spinner(f"Deregistering {hostname} from {cfg.master_url} ..."):
            # The name the master knows, in case NODE_NAME changed since the registration.
            reply = known = client.self_info()
            if known.ok and isinstance(known.body, dict) and known.body.get("hostname"):
                hostname = known.body["hostname"]
            if known.status != 0:
                reply = client.deregister(hostname)
        if reply.ok:
            deregistered = True
        elif reply.status == 404:
            output.say(f"The master does not know {hostname}: nothing to deregister.")
            deregistered = True
        else:
            problem = CliError(
                f"could not deregister from master at {cfg.master_ip}: {reply.reason()}. "
                "The services are stopped, but the node stays registered (the master shows it "
                "Offline).",
                hint="Once the master answers, run again:",
                commands=[_health_command(cfg), "mac stop agent"],
            )
    states = runtime.stop(ROLE, specs)
    if deregistered:
        write_env_file(cfg.node_file, {NODE_KEY: None})
        output.ok(f"Deregistered {hostname} from master {cfg.master_ip}.")
    still = [s.name for s in states if s.running]
    if still:
        raise CliError(f"still running: {', '.join(still)}", commands=["mac status"])
    output.say(f"Stopped {len(states)} agent services ({runtime.name} runtime).")
    if problem:
        raise problem
    return 0


def restart(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime, specs = runtime_and_specs(cfg, runtime_name, remove_stale)
    states = runtime.restart(ROLE, specs)
    print_states(states, f"Agent services ({runtime.name} runtime)")
    if cfg.node_key:
        output.ok("Restarted; the node stays registered.")
    else:
        output.say("Restarted. This node is not registered yet: run `mac start agent`.")
    return 0


def master_view(cfg: NodeConfig) -> tuple[str, dict | None]:
    """One line on what the master says of this node, and the node JSON when it answered."""
    if not cfg.master_ip:
        return "Master: MASTER_IP is not set (mac env set MASTER_IP=<master-ip>).", None
    if not cfg.node_key:
        return f"Master {cfg.master_ip}: this node is not registered (run: mac start agent).", None
    reply = _client(cfg, timeout=5).self_info()
    if reply.ok and isinstance(reply.body, dict):
        node = reply.body
        line = (
            f"Master {cfg.master_ip}: {node.get('hostname')} ({node.get('ip')}) is "
            f"{str(node.get('status', '?')).capitalize()}"
        )
        reason = node.get("status_detail") or node.get("status_reason")
        if reason:
            line += f" ({reason})"
        if node.get("diagnosis"):
            line += f"; diagnosis: {node['diagnosis']}"
        if node.get("last_seen"):
            line += f"; last seen {node['last_seen']}"
        return line, node
    if reply.status in (403, 404):
        return (
            f"Master {cfg.master_ip}: does not know this node's key ({reply.reason()}); "
            "run: sudo mac start agent",
            None,
        )
    return f"Master {cfg.master_ip}: no answer ({reply.reason()}).", None


def status(runtime_name: str | None = None, as_json: bool = False) -> int:
    import json

    cfg = NodeConfig.load()
    runtime, specs = runtime_and_specs(cfg, runtime_name)
    states = runtime.status(ROLE, specs)
    line, node = master_view(cfg)
    healthy = all(s.running and s.health in ("ok", "-") for s in states)
    if as_json:
        output.out().print_json(
            json.dumps(
                {
                    "runtime": runtime.name,
                    "services": [s.__dict__ for s in states],
                    "master": node,
                    "master_line": line,
                    "ok": healthy,
                }
            )
        )
        return 0 if healthy else 1
    print_states(states, f"Agent services ({runtime.name} runtime)")
    output.say(line)
    return 0 if healthy else 1
