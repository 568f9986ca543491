"""The agent's compose files parse and say what the contract says (the master's is written
from its specs: test_master_compose.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from contract.services import (
    SERVICES,
)

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _load(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def _port_variable(name: str) -> str:
    return f"MAC_{name.upper().replace('-', '_')}_PORT"


def test_agent_compose_runs_every_service_of_the_table_as_mac_service():
    compose = _load("docker-compose.agent.yml")
    # The project comes from `-p mac`: Compose 1.29 rejects a top-level name.
    assert "name" not in compose and "version" not in compose
    services = compose["services"]
    assert set(services) == {s.name for s in SERVICES}
    for service in SERVICES:
        spec = services[service.name]
        assert spec["container_name"] == f"mac-{service.name}"
        assert spec["restart"] == "unless-stopped"
        assert spec["image"] == "${MAC_IMAGE:-mac:latest}"
        assert spec["command"][0] == service.name
        # The node's port for it, inside the container as outside, in both modes.
        port = f"${{{_port_variable(service.name)}:-{service.port}}}"
        assert spec["command"][1:3] == ["--port", port], service.name
        assert spec["environment"]["MAC_LIVENESS"] == f"{port}{service.liveness_path}"
        if service.network == "host":
            assert spec["network_mode"] == "host"
        else:
            # The mode's overlay says how it is reached; Compose 1.29 cannot drop a key.
            assert not {"network_mode", "networks", "ports"} & set(spec), service.name


def test_bridge_overlay_is_the_guide_s_layout_published_ports_on_the_agent_bridge():
    compose = _load("docker-compose.agent.bridge.yml")
    bridged = {s.name for s in SERVICES if s.network == "bridge"}
    assert set(compose["services"]) == bridged
    assert compose["networks"] == {"agent": {"driver": "bridge"}}
    for service in SERVICES:
        if service.name not in bridged:
            continue
        spec = compose["services"][service.name]
        extra = {"environment"} if service.name == "sys-manager" else set()
        assert set(spec) == {"networks", "ports", *extra}
        assert spec["networks"] == ["agent"]
        variable = _port_variable(service.name)
        assert spec["ports"] == [f"${{{variable}:-{service.port}}}:${{{variable}:-{service.port}}}"]


def test_sys_manager_knows_its_mode_and_may_reassert_ip_forward_only_in_host_mode():
    base = _load("docker-compose.agent.yml")["services"]["sys-manager"]
    assert base["environment"]["MAC_IPFORWARD_REASSERT"] is None  # passed through from mac
    assert base["environment"]["MAC_STATE_DIR"] is None  # where `mac gpu reset` records
    bridge = _load("docker-compose.agent.bridge.yml")["services"]["sys-manager"]
    assert bridge["environment"] == {"MAC_AGENT_NETWORK": "bridge"}
    assert "cap_add" not in bridge and "volumes" not in bridge
    host = _load("docker-compose.agent.host.yml")["services"]["sys-manager"]
    assert host["environment"] == {"MAC_AGENT_NETWORK": "host"}
    assert host["cap_add"] == ["NET_ADMIN"]
    flag = "/proc/sys/net/ipv4/ip_forward"
    assert host["volumes"] == [f"{flag}:/host{flag}:rw"]  # over the read-only /host/proc


def test_host_overlay_puts_every_exporter_on_the_host_and_node_exporter_as_its_readme_asks():
    compose = _load("docker-compose.agent.host.yml")
    assert "networks" not in compose
    bridged = {s.name for s in SERVICES if s.network == "bridge"}
    assert set(compose["services"]) == bridged  # nic-exporter is on the host already
    for name, spec in compose["services"].items():
        assert spec["network_mode"] == "host", name
        assert "ports" not in spec and "networks" not in spec
    sys_exporter = compose["services"]["sys-exporter"]
    assert sys_exporter["pid"] == "host"
    # rslave by default; `mac` makes it ro where the host's / cannot propagate.
    assert sys_exporter["volumes"] == ["/:/host/root:${MAC_ROOTFS_OPTIONS:-ro,rslave}"]
    shared = _load("docker-compose.agent.yml")["services"]["sys-exporter"]
    command = shared["command"]
    assert command[command.index("--rootfs") + 1] == "/host/root"  # --path.rootfs


def test_nic_exporter_reads_sys_and_gpu_exporters_get_their_devices():
    services = _load("docker-compose.agent.yml")["services"]
    assert "/sys:/sys:ro" in services["nic-exporter"]["volumes"]
    assert services["dcgm-exporter"]["profiles"] == ["nvidia"]
    gpus = services["dcgm-exporter"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpus["driver"] == "nvidia" and gpus["capabilities"] == ["gpu"]
    # The hpc_job opt-in works in a container too: its folder is a host path, read under
    # the host's /, and the setting passes through from the env files.
    dcgm = services["dcgm-exporter"]
    assert dcgm["command"][dcgm["command"].index("--rootfs") + 1] == "/host/root"
    assert "MAC_HPC_JOB_MAPPING_DIR" in dcgm["environment"]
    # XIDs logged before the exporter started are read from the host's kernel log.
    assert dcgm["devices"] == ["/dev/kmsg:/dev/kmsg:r"] and dcgm["cap_add"] == ["SYSLOG"]
    assert services["rocm-exporter"]["profiles"] == ["amd"]
    # Their GPUs' evidence outlives a restart of the container, where the process
    # runtime keeps it as root; every exporter's read-only views stay.
    folder = "/var/lib/mac/agent/gpu"
    for name in ("dcgm-exporter", "rocm-exporter"):
        command = services[name]["command"]
        assert command[command.index("--state-dir") + 1] == folder
        assert services[name]["volumes"] == [
            "/sys:/host/sys:ro", "/proc:/host/proc:ro", "/:/host/root:ro",
            f"${{MAC_STATE_DIR:-/var/lib/mac}}/agent/gpu:{folder}",
        ]  # fmt: skip
    devices = set(services["rocm-exporter"]["devices"])
    assert {"${MAC_DEV_ROOT:-/dev}/kfd:/dev/kfd", "${MAC_DEV_ROOT:-/dev}/dri:/dev/dri"} <= devices


def test_dockerfile_takes_the_base_as_an_argument_and_installs_from_the_wheelhouse_only():
    text = (DOCKER / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE} AS system" in text
    assert "pip install --no-cache-dir --no-index --find-links wheelhouse" in text
    assert 'ENTRYPOINT ["mac-exporter"]' in text


def test_the_image_s_own_stage_never_copies_the_wheelhouse():
    """The build context holds wheelhouse/: the stage that installs from it is not the
    image's, which takes the environment from it, so no layer of the image keeps a wheel.
    In the classic builder's syntax (Debian's docker.io 20.10, DOCKER_BUILDKIT=0)."""
    text = (DOCKER / "Dockerfile").read_text()
    final = re.split(r"^FROM ", text, flags=re.MULTILINE)[-1]
    copies = [line for line in final.splitlines() if line.startswith(("COPY", "ADD"))]
    assert copies == ["COPY --from=venv /opt/mac /opt/mac"], copies
    assert "wheelhouse" not in final
    assert "--mount" not in text and "# syntax=" not in text  # BuildKit's alone


def test_the_image_has_every_debian_package_the_guide_runs_in_containers():
    listed = (DOCKER / "debian-packages.txt").read_text().splitlines()
    packages = {line.strip() for line in listed if line.strip() and not line.startswith("#")}
    assert {
        "ethtool", "rocm-smi", "prometheus-node-exporter", "prometheus", "redis-server", "nginx"
    } <= packages  # fmt: skip


def test_entries_without_a_value_are_the_ones_mac_passes_through():
    from maccli.runtimes.docker import passed_through

    text = (DOCKER / "docker-compose.master.yml").read_text()
    names = passed_through(text)
    assert {"MAC_ALERT_FOR", "MAC_NODE_NETWORKS", "MAC_DB_STATEMENT_TIMEOUT"} <= names
    assert "MAC_REDIS_URL" not in names  # fixed by the file
    assert passed_through("services:\n  a:\n    environment: [A=1, B]\n") == {"B"}
    assert passed_through("services: [") == set()
