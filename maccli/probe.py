"""`mac probe <agent>`: probe a node the way the master's sweep does, and say what it sees.

It runs the master's own code (contract.liveness: plain asyncio, no Django settings)
against every service of the contract table on that address, then judges the node with
contract.diagnosis: Online exactly when sys-exporter answers, and otherwise the
diagnosis and fix the dashboard would show. Useful on the master (what does the sweep
see?) and anywhere else on the path to the node.

The master probes sys-exporter, nic-exporter and the services the node registered. A
service that refuses the connection is not running there, so a node would not have
registered it: the diagnosis leaves such services out, as the master's would.

The diagnosis depends on the node's network mode (host or bridge, reported at
registration), which only the master knows. `--network` gives it; without it, a node
probing its own address asks its master (GET /api/v1/self with its node key), and any
other address is looked up in the master's inventory with an API token of a master user
(MAC_API_TOKEN; GET /api/v1/nodes/?ip=<ip>). An address the inventory lacks is said
to be so: the master does not probe it at all. With neither, or when the master refuses
the token or does not answer (a warning), the mode is unknown: the node is judged as an
agent older than the mode (bridge), which the master does only for a node that
registered no mode, so the output says the master may judge differently.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass

from contract.diagnosis import describe, diagnose
from contract.liveness import NodeProbe, Target, outcome_words, run_probe
from contract.master_api import MasterClient, Reply
from contract.outcomes import DIAGNOSIS_LABELS, Diagnosis, Outcome
from contract.pinning import UntrustedMaster
from contract.services import BY_NAME, NIC_EXPORTER, SERVICES, SYS_EXPORTER, AgentNetwork
from contract.settings.kinds import valid_hostname
from maccli import output
from maccli.output import CliError
from node.config import NodeConfig

MAX_TIMEOUT = 60.0


def _usage(message: str) -> CliError:
    return CliError(
        message,
        hint="Give the agent's address or host name (ports come from the contract table):",
        commands=["mac probe 10.0.0.17", "mac probe gpu-07 --timeout 4"],
        code=2,
    )


def resolve(target: str) -> str:
    """The IP address the probes go to, from an address or a host name; CliError otherwise."""
    text = target.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if "://" in text or "/" in text or (text.count(":") == 1 and not valid_hostname(text)):
        raise _usage(f"{target!r} is not an address or host name (no scheme, port or path).")
    if not valid_hostname(text):
        raise _usage(f"{target!r} is not an address or host name.")
    try:
        infos = socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise CliError(
            f"cannot resolve {text!r}: {getattr(exc, 'strerror', None) or exc}.",
            hint="Check the name, or give the node's address instead:",
            commands=[f"getent hosts {text}", "mac probe <agent-ip>"],
        ) from None
    # The master probes the address it stored; prefer IPv4 as a registration reports.
    addresses = [info[4][0] for info in infos]
    ipv4 = [a for a in addresses if ":" not in a]
    return (ipv4 or addresses)[0]


def _timeout(cfg: NodeConfig, given: float | None) -> float:
    if given is None:
        # The sweep's own timeout (MAC_PROBE_TIMEOUT) where this node knows it.
        given = cfg.value_or_default("MAC_PROBE_TIMEOUT", output.warn)
    if not 0 < given <= MAX_TIMEOUT:
        raise _usage(f"--timeout {given:g} is out of range (0 < S <= {MAX_TIMEOUT:g} seconds).")
    return given


@dataclass(frozen=True)
class NetworkMode:
    """The node's network mode as far as `mac` can tell, and who says so."""

    mode: str = ""  # an AgentNetwork value; "" when unknown or none was registered
    source: str = ""  # who says; "" when nobody does (the mode is unknown)
    # The master has a node at the address: None when it was not asked or did not answer.
    registered: bool | None = None


def _registered(node: dict, source: str) -> NetworkMode:
    """The mode of the master's record of a node ("": an agent older than the mode)."""
    mode = node.get("agent_network")
    if mode not in {*AgentNetwork, ""}:
        return NetworkMode(registered=True)  # a mode this mac does not know
    return NetworkMode(mode, source, registered=True)


def node_network(cfg: NodeConfig, ip: str, given: str | None) -> NetworkMode:
    """The node's network mode: --network, else what its master registered.

    A node probing its own address asks with its node key (GET /api/v1/self); any other
    address is looked up in the inventory with MAC_API_TOKEN. A master that refuses the
    token or does not answer is a warning, and the mode stays unknown.
    """
    if given:
        return NetworkMode(given, "--network")
    if not cfg.master_ip or not (cfg.node_key or cfg.api_token):
        return NetworkMode()
    try:
        return _ask_master(cfg, ip)
    except UntrustedMaster as exc:
        output.warn(f"{exc}; the network mode of {ip} stays unknown.")
        return NetworkMode()


def _ask_master(cfg: NodeConfig, ip: str) -> NetworkMode:
    master = cfg.master_ip

    def client(**credentials: str) -> MasterClient:
        return MasterClient(cfg.master_url, timeout=3.0, ca_pin=cfg.master_ca_pin, **credentials)

    if cfg.node_key:
        # The master answers with the node's own record only: used for its own address.
        reply = client(join_token=cfg.join_token, node_key=cfg.node_key).self_info()
        body = reply.body if reply.ok and isinstance(reply.body, dict) else {}
        if body.get("ip") == ip:
            return _registered(body, f"registered with master {master}")
        if not cfg.api_token:
            return NetworkMode()
        if reply.status == 0:  # no answer: the token would get none either
            return _unknown(master, ip, reply)
    node, reply = client(api_token=cfg.api_token).node_at(ip)
    if node is not None:
        return _registered(node, f"registered with master {master} via MAC_API_TOKEN")
    if reply.ok:
        return NetworkMode(registered=False)
    return _unknown(master, ip, reply)


def _unknown(master: str, ip: str, reply: Reply) -> NetworkMode:
    """The master did not say: a warning naming why, and the mode unknown."""
    if reply.status in (401, 403):
        output.warn(
            f"master {master} refuses MAC_API_TOKEN ({reply.reason()}), so the network mode "
            f"of {ip} stays unknown. Make a token on the master (python manage.py "
            "drf_create_token <username>, docs/api.md), then: mac env set MAC_API_TOKEN=<token>"
        )
    else:
        output.warn(
            f"cannot read the network mode of {ip} from master {master} ({reply.reason()}); "
            "it stays unknown."
        )
    return NetworkMode()


def service_network(service_network: str, mode: str) -> str:
    """Where a service listens in this mode: everything on the host in host mode."""
    return AgentNetwork.HOST.value if mode == AgentNetwork.HOST else service_network


def judged(results: dict) -> dict:
    """The results the master's diagnosis would have: refusing extras are not running."""
    keep = {SYS_EXPORTER.name, NIC_EXPORTER.name}
    return {
        name: result
        for name, result in results.items()
        if name in keep or result.outcome is not Outcome.REFUSED
    }


def probe(
    target: str, timeout: float | None = None, as_json: bool = False, network: str | None = None
) -> int:
    ip = resolve(target)
    cfg = NodeConfig.load()
    seconds = _timeout(cfg, timeout)
    known = node_network(cfg, ip, network)
    mode = known.mode
    names = tuple(service.name for service in SERVICES)
    if not as_json:
        output.err().print(f"Probing {len(names)} services of {ip} (timeout {seconds:g} s) ...")
    [node] = run_probe([Target(0, ip, names)], timeout=seconds, concurrency=len(names))
    host = f"[{ip}]" if ":" in ip else ip
    rows = []
    for service in SERVICES:
        result = node.results[service.name]
        rows.append(
            {
                "service": service.name,
                "port": service.port,
                "network": service_network(service.network, mode),
                "url": f"http://{host}:{service.port}{service.liveness_path}",
                "outcome": str(result.outcome),
                "words": outcome_words(result),
                "http_status": result.http_status,
                "detail": result.detail,
                "ms": round(result.elapsed * 1000, 1),
            }
        )
    basis = judged(node.results)
    code = diagnose(NodeProbe(node.node_id, ip, basis), mode)
    meaning, fix = describe(code)
    # The mode unknown, judged as bridge: where host mode (new installs' default) reads the
    # same probes otherwise, that reading is given too, so neither is taken on trust.
    if_host = (
        "" if known.source else diagnose(NodeProbe(node.node_id, ip, basis), AgentNetwork.HOST)
    )
    if_host = "" if if_host == code else if_host
    online = node.sys.ok
    label = DIAGNOSIS_LABELS[Diagnosis(code)] if code else ""
    if as_json:
        output.out().print_json(
            json.dumps(
                {
                    "address": target,
                    "ip": ip,
                    "timeout": seconds,
                    "network": mode,
                    "network_source": known.source,
                    "registered": known.registered,
                    "online": online,
                    "results": rows,
                    "judged_on": sorted(basis),
                    "diagnosis": {
                        "code": str(code),
                        "label": label,
                        "meaning": meaning,
                        "fix": fix,
                    },
                    # The mode unknown: the diagnosis a host-mode node would get, where it differs.
                    "diagnosis_if_host": {
                        "code": str(if_host),
                        "label": DIAGNOSIS_LABELS[Diagnosis(if_host)],
                        "meaning": describe(if_host)[0],
                        "fix": describe(if_host)[1],
                    }
                    if if_host
                    else None,
                }
            )
        )
        return 0 if online else 1
    output.table(
        ["SERVICE", "PORT", "NETWORK", "URL", "OUTCOME", "TIME"],
        [
            (
                row["service"],
                str(row["port"]),
                row["network"],
                row["url"],
                output.styled(row["words"]),
                f"{row['ms']:.1f} ms" if row["ms"] < 10 else f"{row['ms']:.0f} ms",
            )
            for row in rows
        ],
    )
    if mode:
        output.say(f"Network mode: {mode} ({known.source}).")
    elif known.source:
        output.say(
            f"Network mode: none ({known.source}): an agent older than the mode, judged as "
            "bridge, as the master does."
        )
    elif known.registered is False:
        output.say(
            f"{ip} is not in the inventory of master {cfg.master_ip}: the master does not "
            "probe it at all (`mac start agent` on that node registers it). Judged here as an "
            "agent older than the mode (bridge).",
            "yellow",
        )
    else:
        # Only the master knows what the node registered, and only behind a login, an API
        # token or the node's own key.
        output.say(
            "Network mode: unknown: the master may judge differently (judged here as an agent "
            "older than the mode: bridge). The node's page on the dashboard shows the "
            f"mode it registered (Network; agent_network in GET /api/v1/nodes/?ip={ip}). "
            "Let mac read it with an API token of a master user (mac env set "
            "MAC_API_TOKEN=<token>; docs/api.md), or give it with --network host|bridge."
        )
    sys_row = rows[[s.name for s in SERVICES].index(SYS_EXPORTER.name)]
    marks = "once registered, the master marks" if known.registered is False else "the master marks"
    if online:
        output.ok(f"sys-exporter answers: {marks} {ip} Online.")
        return 0
    output.say(f"sys-exporter ({sys_row['words']}) does not answer: {marks} {ip} Offline.", "red")
    others = ", ".join(sorted(set(BY_NAME) - set(basis)))
    if others and node.sys.outcome is Outcome.TIMEOUT:
        output.say(
            f"Not counted in the diagnosis (refused, so not running there; the master probes "
            f"only the services a node registered): {others}."
        )
    output.say(f"Diagnosis: {label}.", "bold")
    output.say(meaning)
    if fix:
        output.say(fix)
    if if_host:
        host_meaning, host_fix = describe(if_host)
        output.say(
            f"If {ip} runs in host mode (the default of new installs), the diagnosis is "
            f"instead: {DIAGNOSIS_LABELS[Diagnosis(if_host)]}.",
            "bold",
        )
        output.say(host_meaning)
        if host_fix:
            output.say(host_fix)
    return 1
