"""service:<name> checks: each service asked where it answers from the checks' namespace.

Real HTTP servers on loopback stand in for the services, each on an address of its own
(127.0.0.2, 127.0.0.3: every 127/8 address is the loopback's), so that a check asking
127.0.0.1 instead finds nothing there. The bridge's DNS and routes are given through
the context: a resolver that maps names onto those addresses, a route file.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import yaml

from contract.services import BY_NAME, SERVICES
from node.checks import CheckContext, CheckStatus
from node.checks.services import service_checks
from node.config import NodeConfig
from node.host import Roots
from tests.node.checks.standins import lookup_in, routes, service_at

DOCKER = Path(__file__).resolve().parents[3] / "docker"


def bridge_context(
    tmp_path: Path, ports: dict[str, int], route_text: str | None = None, **extra
) -> CheckContext:
    """sys-manager's context in bridge mode: a namespace of its own, the node's ports, its
    own route file (route_text; none written when None)."""
    environ = {
        "MAC_USER_ENV_FILE": str(tmp_path / "user.env"),
        "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
        **{f"MAC_{name.upper().replace('-', '_')}_PORT": str(p) for name, p in ports.items()},
    }
    route_file = tmp_path / "route"
    tmp_path.mkdir(parents=True, exist_ok=True)
    if route_text is not None:
        route_file.write_text(route_text)
    return CheckContext(
        roots=node_roots(tmp_path),
        extra={
            "config": NodeConfig.load(environ),
            "services": list(ports),
            "netns_of_its_own": True,
            "route_file": str(route_file),
            "service_timeout": 1.0,
            **extra,
        },
    )


def node_roots(tmp_path: Path, gpu: str = "") -> Roots:
    """The node's trees, with no GPU, or with one NVIDIA GPU's device file ("nvidia")."""
    roots = Roots(
        sys_root=str(tmp_path / "sys"),
        proc_root=str(tmp_path / "proc"),
        dev_root=str(tmp_path / "dev"),
        rootfs=str(tmp_path),
    )
    if gpu == "nvidia":
        (tmp_path / "dev").mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / "nvidia0").touch()
    return roots


def by_id(results) -> dict:
    return {result.id: result for result in results}


def test_in_bridge_mode_a_bridged_service_is_asked_by_name_and_nic_exporter_at_the_gateway(
    tmp_path,
):
    with service_at("127.0.0.2") as sys_port, service_at("127.0.0.3") as nic_port:
        ports = {"sys-exporter": sys_port, "nic-exporter": nic_port}
        ctx = bridge_context(
            tmp_path,
            ports,
            routes(("eth0", "0.0.0.0", "127.0.0.3", 0), ("eth0", "127.0.0.0", "0.0.0.0", 0)),
            resolve=lookup_in({"sys-exporter": "127.0.0.2"}),
        )
        bridge = by_id(service_checks(ctx))
        # Host and process modes share the node's namespace: the configured host is asked.
        ctx.extra.update(netns_of_its_own=False, service_host="127.0.0.2")
        host = by_id(service_checks(ctx))

    sys_exporter, nic_exporter = bridge["service:sys-exporter"], bridge["service:nic-exporter"]
    assert sys_exporter.status == CheckStatus.PASS, sys_exporter
    assert sys_exporter.detail == (
        f"http://127.0.0.2:{sys_port}/metrics (sys-exporter on the agent bridge) answered 200"
    )
    assert nic_exporter.status == CheckStatus.PASS, nic_exporter
    assert nic_exporter.detail == (
        f"http://127.0.0.3:{nic_port}/metrics (the host, at the agent bridge's gateway) "
        "answered 200"
    )
    assert host["service:sys-exporter"].status == CheckStatus.PASS
    assert (
        host["service:sys-exporter"].detail == f"http://127.0.0.2:{sys_port}/metrics answered 200"
    )
    assert host["service:nic-exporter"].status == CheckStatus.FAIL  # nothing on 127.0.0.2
    assert f"http://127.0.0.2:{nic_port}/metrics: no answer" in host["service:nic-exporter"].detail


def test_a_bridged_service_that_does_not_answer_fails_with_the_address_asked(tmp_path):
    with service_at("127.0.0.2") as port:
        pass  # closed: nothing listens there any more
    ctx = bridge_context(
        tmp_path, {"sys-exporter": port}, resolve=lookup_in({"sys-exporter": "127.0.0.2"})
    )
    [result] = service_checks(ctx)
    assert result.status == CheckStatus.FAIL
    assert result.detail == (
        f"http://127.0.0.2:{port}/metrics (sys-exporter on the agent bridge): no answer (refused)"
    )
    assert result.fix == "mac restart agent"


def test_a_name_that_does_not_resolve_is_a_warning_that_sends_to_mac_doctor(tmp_path):
    ctx = bridge_context(tmp_path, {"sw-exporter": 29300}, resolve=lookup_in({}))
    [result] = service_checks(ctx)
    assert result.status == CheckStatus.WARN  # not a verdict on the service
    assert result.detail == (
        "could not ask sw-exporter from sys-manager's network namespace: its name "
        "sw-exporter does not resolve on the agent bridge (Name or service not known); "
        "Docker's DNS knows it only while its container runs. This says nothing of the "
        "service itself; on the host: mac doctor service:sw-exporter"
    )
    assert result.fix == "mac doctor service:sw-exporter"


def test_a_name_whose_lookup_hangs_is_given_up_at_the_timeout_the_others_still_asked(tmp_path):
    release = threading.Event()

    def lookup(name: str) -> str:
        if name == "bmc-agent":
            release.wait(10)  # Docker's DNS forwarding a name it does not know, unanswered
        return "127.0.0.2"

    try:
        with service_at("127.0.0.2") as port:
            ctx = bridge_context(
                tmp_path, {"sys-exporter": port, "bmc-agent": port}, resolve=lookup
            )
            ctx.extra["service_timeout"] = 0.3
            started = time.monotonic()
            results = by_id(service_checks(ctx))
            took = time.monotonic() - started
    finally:
        release.set()
    assert took < 2, took
    assert results["service:sys-exporter"].status == CheckStatus.PASS
    hung = results["service:bmc-agent"]
    assert hung.status == CheckStatus.WARN
    assert "its name bmc-agent did not resolve within 0.3 s" in hung.detail
    assert hung.fix == "mac doctor service:bmc-agent"


def test_without_a_default_route_a_host_network_service_is_a_warning_not_a_failure(tmp_path):
    only_the_bridge = routes(("eth0", "127.0.0.0", "0.0.0.0", 0))
    ctx = bridge_context(tmp_path, {"nic-exporter": 29500}, only_the_bridge)
    [result] = service_checks(ctx)
    assert result.status == CheckStatus.WARN
    assert result.detail == (
        "could not ask nic-exporter from sys-manager's network namespace: "
        f"{tmp_path / 'route'} has no default route, so the host's address is unknown. "
        "This says nothing of the service itself; on the host: mac doctor service:nic-exporter"
    )
    assert result.fix == "mac doctor service:nic-exporter"

    ctx = bridge_context(tmp_path / "none", {"nic-exporter": 29500})  # no route file at all
    [result] = service_checks(ctx)
    assert result.status == CheckStatus.WARN
    assert f"cannot read {tmp_path / 'none' / 'route'} (No such file or directory)" in result.detail


def test_the_names_asked_are_the_bridge_overlay_s_services_on_the_agent_network(tmp_path):
    """The checks take Service.network from the contract's table; the names they ask must be
    those Docker's DNS knows on the `agent` network of the bridge overlay."""
    overlay = yaml.safe_load((DOCKER / "docker-compose.agent.bridge.yml").read_text())
    on_agent = {name for name, spec in overlay["services"].items() if spec["networks"] == ["agent"]}
    shared = yaml.safe_load((DOCKER / "docker-compose.agent.yml").read_text())["services"]
    on_host = {name for name, spec in shared.items() if spec.get("network_mode") == "host"}
    asked: list[str] = []

    def lookup(name: str) -> str:
        asked.append(name)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    ports = {service.name: service.port for service in SERVICES}
    ctx = bridge_context(
        tmp_path, ports, routes(("eth0", "0.0.0.0", "127.0.0.3", 0)), resolve=lookup
    )
    ctx.extra["service_timeout"] = 0.3
    results = by_id(service_checks(ctx))
    # No GPU in the test's trees: the GPU exporters are not asked (no_gpus_to_watch).
    gpu_exporters = {s.name for s in SERVICES if s.gpu_vendor}
    assert sorted(asked) == sorted(on_agent - gpu_exporters)
    assert {results[f"service:{name}"].status for name in gpu_exporters} == {CheckStatus.SKIP}
    for name in on_host:
        assert f"http://127.0.0.3:{BY_NAME[name].port}/" in results[f"service:{name}"].detail


def test_a_gpu_exporter_of_a_vendor_the_node_lacks_is_skipped_not_asked(tmp_path):
    """Under Docker such an exporter is not started at all (its Compose profile): asked,
    it would fail with a fix, `mac restart agent`, that can never help."""
    ports = {"dcgm-exporter": 1, "rocm-exporter": 1}  # nothing listens on port 1
    ctx = CheckContext(roots=node_roots(tmp_path), extra={"services": list(ports)})

    results = by_id(service_checks(ctx))

    assert results["service:dcgm-exporter"].status == CheckStatus.SKIP
    assert results["service:dcgm-exporter"].detail == (
        "no NVIDIA GPU on this node: dcgm-exporter has nothing to watch here (under Docker "
        "it is not started)."
    )
    assert results["service:rocm-exporter"].status == CheckStatus.SKIP
    assert "no AMD GPU on this node" in results["service:rocm-exporter"].detail

    nvidia = CheckContext(roots=node_roots(tmp_path / "gpu", "nvidia"), extra=ctx.extra)
    results = by_id(service_checks(nvidia))
    assert results["service:dcgm-exporter"].status == CheckStatus.FAIL  # its GPU is here
    assert results["service:rocm-exporter"].status == CheckStatus.SKIP


def test_silence_at_the_bridge_s_gateway_is_a_warning_a_hang_or_refusal_a_failure(tmp_path):
    """A host firewall that drops what comes from the bridge (ufw's default) leaves the
    connection unopened whatever nic-exporter does: a warning. A connection opened and
    left unanswered (nic-exporter hung) or refused (nothing listens) is a failure."""
    gateway = routes(("eth0", "0.0.0.0", "127.0.0.3", 0))
    dropped = socket.socket()  # a listener whose backlog is full: new connections hang
    dropped.bind(("127.0.0.3", 0))
    dropped.listen(0)
    filler = socket.create_connection(dropped.getsockname())
    silent = socket.socket()  # a listener with room that never answers: a hung service
    silent.bind(("127.0.0.3", 0))
    silent.listen(8)

    def ask(port: int):
        ctx = bridge_context(tmp_path, {"nic-exporter": port}, gateway, service_timeout=0.5)
        [result] = service_checks(ctx)
        return result

    try:
        result, hung = ask(dropped.getsockname()[1]), ask(silent.getsockname()[1])
    finally:
        filler.close()
        dropped.close()
    closed = silent.getsockname()[1]
    silent.close()
    assert result.status == CheckStatus.WARN
    assert "did not open a connection within 0.5 s" in result.detail
    assert result.fix == "mac doctor service:nic-exporter"
    assert hung.status == CheckStatus.FAIL and hung.detail.endswith(": no answer (timeout)")

    refused = ask(closed)  # nothing listens there now
    assert refused.status == CheckStatus.FAIL and "refused" in refused.detail
