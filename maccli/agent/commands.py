"""The four agent commands: start, stop, restart and status, over the modules beside them."""

from __future__ import annotations

import json

from maccli import gpureset, output
from maccli.agent import guards, network
from maccli.agent.registration import (
    agent_ip,
    check_master,
    client,
    deregister,
    forget_registration,
    master_view,
    register,
)
from maccli.agent.specs import ROLE, moved_ports, runtime_and_specs
from maccli.output import CliError, print_states
from node.config import NodeConfig


def _title(runtime_name: str, mode: str) -> str:
    return f"Agent services ({runtime_name} runtime, {mode} network)"


def start(
    runtime_name: str | None = None, remove_stale: bool = False, network_mode: str | None = None
) -> int:
    cfg = NodeConfig.load()
    master_ip = guards.require_master_ip(cfg)
    guards.warn_shared_master_ip(cfg)
    hostname = guards.resolve_node_name(cfg)
    guards.require_node_file_writable(cfg)
    guards.require_valid_master_port(cfg)
    ip = agent_ip(cfg)
    check_master(cfg, client(cfg, source_ip=ip, timeout=5))
    runtime, specs = runtime_and_specs(cfg, runtime_name, remove_stale)
    if moved := moved_ports(specs):
        output.warn(moved)
    mode = network.choose_for_start(cfg, runtime, specs, network_mode)
    states = runtime.start(ROLE, specs)
    print_states(states, _title(runtime.name, mode))
    gpureset.forget_finished_reset(cfg, states)
    node = register(cfg, hostname, ip, specs, network.reported_network(runtime))
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
    network.choose_for_running(cfg, runtime, specs)
    key_spent, problem, removed = deregister(cfg, cfg.node_name()[0])
    states = runtime.stop(ROLE, specs)
    if key_spent:
        forget_registration(cfg)
    still = [s.name for s in states if s.running]
    if not still:
        output.say(f"Stopped {len(states)} agent services ({runtime.name} runtime).")
    if removed:  # said after the services, whichever way they went
        output.ok(removed)
    if still:
        raise CliError(f"still running: {', '.join(still)}", commands=["mac status"])
    if problem:
        raise problem
    return 0


def restart(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime, specs = runtime_and_specs(cfg, runtime_name, remove_stale)
    mode = network.choose_for_running(cfg, runtime, specs, restart=True)
    states = runtime.restart(ROLE, specs)
    print_states(states, _title(runtime.name, mode))
    gpureset.forget_finished_reset(cfg, states)
    if cfg.node_key:
        output.ok("Restarted; the node stays registered.")
    else:
        output.say("Restarted. This node is not registered yet: run `mac start agent`.")
    return 0


def status(runtime_name: str | None = None, as_json: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime, specs = runtime_and_specs(cfg, runtime_name)
    mode = network.choose_for_running(cfg, runtime, specs)
    states = runtime.status(ROLE, specs)
    line, node = master_view(cfg)
    healthy = all(s.running and s.health in ("ok", "-") for s in states)
    if as_json:
        output.out().print_json(
            json.dumps(
                {
                    "runtime": runtime.name,
                    "network": str(mode),
                    "services": [s.__dict__ for s in states],
                    "master": node,
                    "master_line": line,
                    "ok": healthy,
                }
            )
        )
        return 0 if healthy else 1
    print_states(states, _title(runtime.name, mode))
    output.say(line)
    return 0 if healthy else 1
