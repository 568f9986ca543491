"""The compose files parse and say what the contract says."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from contract.services import (
    MASTER_ALERTMANAGER_PORT,
    MASTER_API_PORT,
    MASTER_PROMETHEUS_PORT,
    MASTER_TLS_PORT,
    SERVICES,
)

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _load(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def _published(ports: list[str], on: str = "") -> list[tuple[int, int]]:
    """(host port, container port) of each mapping, which must be published on the
    address `on` ("" for every address)."""
    pairs = []
    prefix = re.escape(f"{on}:") if on else ""
    for item in ports:
        match = re.fullmatch(prefix + r"\$\{[A-Z_]+:-(\d+)\}:(\d+)", item)
        assert match, f"port mapping {item!r} is not {on or ''}${{VAR:-default}}:container"
        pairs.append((int(match.group(1)), int(match.group(2))))
    return pairs


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
    assert services["rocm-exporter"]["profiles"] == ["amd"]
    devices = set(services["rocm-exporter"]["devices"])
    assert {"${MAC_DEV_ROOT:-/dev}/kfd:/dev/kfd", "${MAC_DEV_ROOT:-/dev}/dri:/dev/dri"} <= devices


def test_master_compose_has_api_worker_beat_prometheus_alertmanager_with_named_volumes():
    compose = _load("docker-compose.master.yml")
    assert "name" not in compose and "version" not in compose
    services = compose["services"]
    assert set(services) == {
        "redis",
        "api-server",
        "proxy",
        "worker",
        "beat",
        "prometheus",
        "alertmanager",
    }
    for name, spec in services.items():
        assert spec["container_name"] == f"mac-{name}"
        # All from MAC's own image (Debian's prometheus and redis-server): no registry.
        assert spec["image"] == "${MAC_IMAGE:-mac:latest}"
        assert "build" not in spec
        assert spec["restart"] == "unless-stopped"
        assert spec["networks"] == ["master"]
    # Only the proxy publishes the API port; the api-server is reached on the network.
    assert _published(services["proxy"]["ports"]) == [
        (MASTER_API_PORT, MASTER_API_PORT),
        (MASTER_TLS_PORT, MASTER_TLS_PORT),
    ]
    assert "ports" not in services["api-server"]
    prometheus = services["prometheus"]
    # Prometheus and Alertmanager: on the master's loopback only (issue 22), served to
    # other hosts by the proxy behind the gate, and without the lifecycle endpoints.
    assert _published(prometheus["ports"], on="127.0.0.1") == [
        (MASTER_PROMETHEUS_PORT, MASTER_PROMETHEUS_PORT)
    ]
    assert f"--web.listen-address=:{MASTER_PROMETHEUS_PORT}" in prometheus["command"]
    assert "--web.enable-lifecycle" not in prometheus["command"]
    assert "--web.route-prefix=/" in prometheus["command"]
    assert (
        "--web.external-url=${MAC_PUBLIC_URL:-http://localhost:28080}/prometheus/"
        in prometheus["command"]
    )
    proxy = services["proxy"]["command"][-1]
    assert "--prometheus prometheus:29090 --alertmanager mac-alertmanager:29093" in proxy
    assert "ports" not in services["redis"]
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
    for step in steps:
        assert step in api
    # MAC's one gunicorn configuration, as under the process runtime, with only the
    # address and workers added; it believes X-Forwarded-For from the proxy's network.
    assert (
        "exec gunicorn macweb.asgi:application -c python:macweb.gunicorn_conf "
        "--bind 0.0.0.0:28080 --workers $${MAC_API_WORKERS:-2} --access-logfile -"
    ) in api
    assert "-k " not in api and "UvicornWorker" not in api
    assert "MAC_DB_STATEMENT_TIMEOUT=0 python -m django migrate" in api
    assert services["api-server"]["environment"]["FORWARDED_ALLOW_IPS"] == "*"
    assert "exec celery -A macweb worker" in services["worker"]["command"][-1]
    assert "exec celery -A macweb beat" in services["beat"]["command"][-1]
    # Alertmanager on 29093 reads what the api-server writes; its silences on a volume.
    alerts = services["alertmanager"]
    assert _published(alerts["ports"], on="127.0.0.1") == [
        (MASTER_ALERTMANAGER_PORT, MASTER_ALERTMANAGER_PORT)
    ]
    command = alerts["command"][-1]
    assert "--web.external-url=${MAC_PUBLIC_URL:-http://localhost:28080}/alertmanager/" in command
    assert f"--web.listen-address=:{MASTER_ALERTMANAGER_PORT}" in command
    assert "--cluster.listen-address=" in command
    assert "mac-alertmanager:/alertmanager" in alerts["volumes"]
    assert "mac-alertmanager-config:/var/lib/mac-alertmanager:ro" in alerts["volumes"]
    assert "mac-alertmanager-config:/var/lib/mac-alertmanager" in services["api-server"]["volumes"]
    for step in ("alert_channels_from_env", "alertmanager_config"):
        assert step in api


def test_master_proxy_is_nginx_configured_by_mac_in_front_of_the_api_server():
    proxy = _load("docker-compose.master.yml")["services"]["proxy"]
    assert proxy["container_name"] == "mac-proxy"
    assert proxy["depends_on"] == ["api-server"]
    command = " ".join(proxy["command"])
    assert (
        "python -m django proxy_config --out /tmp/mac-proxy/nginx.conf "
        "--listen 0.0.0.0:28080 --upstream api-server:28080 --resolver 127.0.0.11 "
        "--prometheus prometheus:29090 --alertmanager mac-alertmanager:29093 "
        "--tls-listen 0.0.0.0:28443 &&"
    ) in command
    assert "exec nginx -p /tmp/mac-proxy -c /tmp/mac-proxy/nginx.conf -e stderr" in command
    # The limits it renders come from the same variables as under the process runtime.
    for name in ("MAC_TRUSTED_PROXIES", "MAC_API_REQUEST_TIMEOUT", "MAC_API_MAX_HEADER_BYTES"):
        assert proxy["environment"][name] == f"${{{name}:-}}"
    assert "/health" in " ".join(proxy["healthcheck"]["test"])


def test_dockerfile_takes_the_base_as_an_argument_and_installs_from_the_wheelhouse_only():
    text = (DOCKER / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") == 1
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}" in text
    assert "pip install --no-cache-dir --no-index --find-links wheelhouse" in text
    assert 'ENTRYPOINT ["mac-exporter"]' in text


def test_the_image_has_every_debian_package_the_guide_runs_in_containers():
    listed = (DOCKER / "debian-packages.txt").read_text().splitlines()
    packages = {line.strip() for line in listed if line.strip() and not line.startswith("#")}
    assert {
        "ethtool", "rocm-smi", "prometheus-node-exporter", "prometheus", "redis-server", "nginx"
    } <= packages  # fmt: skip


def test_master_prometheus_loads_the_rules_and_reads_the_token_the_api_server_writes():
    compose = _load("docker-compose.master.yml")
    services = compose["services"]
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/alerts.yml"]
    # The rules come with the code, linked into the image where the config looks.
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "ln -sfn /opt/mac/healthcheck/prometheus /etc/prometheus/rules" in dockerfile
    master_job = next(j for j in config["scrape_configs"] if j["job_name"] == "mac-master")
    token_file = master_job["authorization"]["credentials_file"]
    assert token_file == "/etc/prometheus/auth/metrics_token"
    assert "mac-prometheus-auth:/etc/prometheus/auth:ro" in services["prometheus"]["volumes"]
    assert "mac-prometheus-auth:/etc/prometheus/auth" in services["api-server"]["volumes"]
    assert "mac-prometheus-auth" in compose["volumes"]
    api = " ".join(services["api-server"]["command"])
    assert f"prometheus_config --metrics-token-file {token_file} &&" in api
    assert services["api-server"]["environment"]["MAC_METRICS_TOKEN"] == "${MAC_METRICS_TOKEN:-}"


# Settings of macweb/settings.py that the master's containers get some other way, each
# with the reason, so that a new setting cannot be forgotten in the compose file.
NOT_PASSED_TO_CONTAINERS = {
    "MAC_SECRET_KEY": "made once in the mac-data volume by prepare_master",
    "MAC_STATIC_ROOT": "the image's own folder",
    "MAC_TEST_DB_NAME": "the test suite's",
    "MAC_CELERY_BROKER_URL": "MAC_REDIS_URL names mac-redis on the master network",
    "MAC_CACHE_PREFIX": "one master per Redis (mac-redis)",
    "MAC_CHANNEL_PREFIX": "one master per Redis (mac-redis)",
    "MAC_AMTOOL_BIN": "the image's amtool",
    "MAC_ALERTMANAGER_MANAGED": "mac-alertmanager is MAC's own under Docker",
    "MAC_SCRAPE_INTERVAL": "mac-prometheus reads docker/prometheus/prometheus.yml",
    "MAC_API_KEEPALIVE": "mac-proxy's (nginx) setting, in its own environment",
    "MAC_API_MAX_CONNECTIONS": "mac-proxy's",
    "MAC_API_MAX_CONNECTIONS_PER_ADDRESS": "mac-proxy's",
    "MAC_API_MAX_HEADER_BYTES": "mac-proxy's",
    "MAC_API_REQUEST_TIMEOUT": "mac-proxy's",
    "MAC_TLS_DIR": "mac-proxy's (prepare_tls, proxy_config): the mac-tls volume",
    "MAC_TLS_CERT": "mac-proxy's",
    "MAC_TLS_KEY": "mac-proxy's",
    "MAC_TLS_NAMES": "mac-proxy's",
    "MAC_HTTP": "mac-proxy's",
}


def test_every_setting_the_master_reads_reaches_its_containers():
    """Under Docker the containers see only what the compose file names: each setting of
    macweb/settings.py is named (with a value, or none to pass `mac env set`'s through)."""
    settings_py = (DOCKER.parent / "macweb" / "settings.py").read_text()
    read = set(re.findall(r"env_[a-z]+\(\s*\"(MAC_[A-Z0-9_]+)\"", settings_py))
    assert len(read) > 30, "the settings' reader changed: update the pattern"
    services = _load("docker-compose.master.yml")["services"]
    for name in ("api-server", "worker", "beat"):
        named = set(services[name]["environment"])
        missing = read - named - set(NOT_PASSED_TO_CONTAINERS)
        assert not missing, f"{name} never gets {sorted(missing)}"
    proxy_settings = {k for k, why in NOT_PASSED_TO_CONTAINERS.items() if "mac-proxy" in why}
    assert proxy_settings <= set(services["proxy"]["environment"])


def test_entries_without_a_value_are_the_ones_mac_passes_through():
    from maccli.runtimes.docker import passed_through

    text = (DOCKER / "docker-compose.master.yml").read_text()
    names = passed_through(text)
    assert {"MAC_ALERT_FOR", "MAC_NODE_NETWORKS", "MAC_DB_STATEMENT_TIMEOUT"} <= names
    assert "MAC_REDIS_URL" not in names  # fixed by the file
    assert passed_through("services:\n  a:\n    environment: [A=1, B]\n") == {"B"}
    assert passed_through("services: [") == set()


def test_master_proxy_serves_https_with_the_ca_kept_on_a_volume():
    services = _load("docker-compose.master.yml")["services"]
    proxy = services["proxy"]
    command = " ".join(proxy["command"])
    # The CA is made on the first start into mac-tls and kept there; the certificate
    # names the host's addresses (from `mac`) and mac-proxy (for mac-prometheus).
    assert command.startswith(
        'sh -c python -m django prepare_tls --name mac-proxy --name "$${MAC_TLS_HOST_NAMES}" && '
    )
    assert "mac-tls:/var/lib/mac-tls" in proxy["volumes"]
    assert proxy["environment"]["MAC_TLS_DIR"] == "/var/lib/mac-tls"
    for name in ("MAC_TLS_CERT", "MAC_TLS_KEY", "MAC_TLS_NAMES", "MAC_TLS_HOST_NAMES"):
        assert proxy["environment"][name] == f"${{{name}:-}}"
    assert proxy["environment"]["MAC_HTTP"] == "${MAC_HTTP:-on}"
    # mac-prometheus scrapes the master through that HTTPS, trusting that CA.
    assert "mac-tls:/etc/prometheus/tls:ro" in services["prometheus"]["volumes"]
    scraped = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    master = scraped["scrape_configs"][0]
    assert master["static_configs"] == [{"targets": [f"mac-proxy:{MASTER_TLS_PORT}"]}]
    assert master["scheme"] == "https"
    assert master["tls_config"] == {"ca_file": "/etc/prometheus/tls/ca.pem"}
