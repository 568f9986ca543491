"""The compose files parse and say what the contract says."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from contract.services import MASTER_API_PORT, MASTER_PROMETHEUS_PORT, SERVICES

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _load(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def _published(ports: list[str]) -> list[tuple[int, int]]:
    pairs = []
    for item in ports:
        match = re.fullmatch(r"\$\{[A-Z_]+:-(\d+)\}:(\d+)", item)
        assert match, f"port mapping {item!r} is not ${{VAR:-default}}:container"
        pairs.append((int(match.group(1)), int(match.group(2))))
    return pairs


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
        if service.network == "host":
            assert spec["network_mode"] == "host"
            assert "ports" not in spec and "networks" not in spec
        else:
            assert spec["networks"] == ["agent"]
            assert _published(spec["ports"]) == [(service.port, service.port)]
            assert str(service.port) in spec["command"]


def test_nic_exporter_reads_sys_and_gpu_exporters_get_their_devices():
    services = _load("docker-compose.agent.yml")["services"]
    assert "/sys:/sys:ro" in services["nic-exporter"]["volumes"]
    assert services["dcgm-exporter"]["profiles"] == ["nvidia"]
    gpus = services["dcgm-exporter"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpus["driver"] == "nvidia" and gpus["capabilities"] == ["gpu"]
    assert services["rocm-exporter"]["profiles"] == ["amd"]
    devices = set(services["rocm-exporter"]["devices"])
    assert {"${MAC_DEV_ROOT:-/dev}/kfd:/dev/kfd", "${MAC_DEV_ROOT:-/dev}/dri:/dev/dri"} <= devices


def test_master_compose_has_api_worker_beat_prometheus_with_named_volumes():
    compose = _load("docker-compose.master.yml")
    assert "name" not in compose and "version" not in compose
    services = compose["services"]
    assert set(services) == {"redis", "api-server", "worker", "beat", "prometheus"}
    for name, spec in services.items():
        assert spec["container_name"] == f"mac-{name}"
        # All from MAC's own image (Debian's prometheus and redis-server): no registry.
        assert spec["image"] == "${MAC_IMAGE:-mac:latest}"
        assert "build" not in spec
        assert spec["restart"] == "unless-stopped"
        assert spec["networks"] == ["master"]
    assert _published(services["api-server"]["ports"]) == [(MASTER_API_PORT, MASTER_API_PORT)]
    prometheus = services["prometheus"]
    assert _published(prometheus["ports"]) == [(MASTER_PROMETHEUS_PORT, MASTER_PROMETHEUS_PORT)]
    assert f"--web.listen-address=:{MASTER_PROMETHEUS_PORT}" in prometheus["command"]
    assert "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "mac-targets:/etc/prometheus/targets:ro" in prometheus["volumes"]
    assert (DOCKER / "prometheus" / "prometheus.yml").is_file()
    # The inventory and the targets live on named volumes shared by api, worker and beat.
    assert set(compose["volumes"]) >= {"mac-data", "mac-targets"}
    for name in ("api-server", "worker", "beat"):
        assert "mac-data:/var/lib/mac" in services[name]["volumes"]
        assert "mac-targets:/var/lib/mac-targets" in services[name]["volumes"]
        assert services[name]["environment"]["MAC_SD_DIR"] == "/var/lib/mac-targets"
    api = " ".join(services["api-server"]["command"])
    steps = ("prepare_master", "migrate", "collectstatic", "createadmin")
    for step in (*steps, "uvicorn_worker.UvicornWorker"):
        assert step in api
    assert "exec celery -A macweb worker" in services["worker"]["command"][-1]
    assert "exec celery -A macweb beat" in services["beat"]["command"][-1]


def test_dockerfile_takes_the_base_as_an_argument_and_installs_from_the_wheelhouse_only():
    text = (DOCKER / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") == 1
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}" in text
    assert "pip install --no-cache-dir --no-index --find-links wheelhouse" in text
    assert 'ENTRYPOINT ["mac-exporter"]' in text


def test_the_image_has_every_debian_package_the_guide_runs_in_containers():
    listed = (DOCKER / "debian-packages.txt").read_text().splitlines()
    packages = {line.strip() for line in listed if line.strip() and not line.startswith("#")}
    assert {"ethtool", "rocm-smi", "prometheus-node-exporter", "prometheus", "redis-server"} <= (
        packages
    )
