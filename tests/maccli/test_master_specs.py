"""The master's services see what `mac env set` wrote, under the process runtime too."""

from __future__ import annotations

from maccli.master.specs import master_specs
from node.config import NodeConfig


def test_every_master_service_gets_the_env_files_settings_but_the_agents_key(tmp_path):
    node_file, user_file = tmp_path / "node.env", tmp_path / "user.env"
    node_file.write_text("MAC_PROBE_INTERVAL=10\nMAC_NODE_KEY=agent-key\nMAC_PROBE_TIMEOUT=9\n")
    user_file.write_text("MAC_SMTP_HOST=smtp.example.org\n")
    environ = {
        "MAC_NODE_ENV_FILE": str(node_file),
        "MAC_USER_ENV_FILE": str(user_file),
        "MAC_DATA_DIR": str(tmp_path / "data"),
        "MAC_PROBE_TIMEOUT": "5",  # the process environment wins over the files
        "PATH": "/usr/bin:/bin",
    }
    specs = master_specs(NodeConfig.load(environ=environ))

    assert {spec.name for spec in specs} >= {"api-server", "worker", "beat", "prometheus"}
    for spec in specs:
        assert spec.env["MAC_PROBE_INTERVAL"] == "10", spec.name
        assert spec.env["MAC_SMTP_HOST"] == "smtp.example.org", spec.name
        assert "MAC_NODE_KEY" not in spec.env, spec.name  # the agent's, not the master's
        # Not in the spec: the runtime starts from the process environment, which holds 5.
        assert "MAC_PROBE_TIMEOUT" not in spec.env, spec.name
        assert spec.env["MAC_DATA_DIR"] == str(tmp_path / "data"), spec.name


def test_only_the_proxy_listens_beyond_the_loopback(tmp_path):
    environ = {
        "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user.env"),
        "MAC_DATA_DIR": str(tmp_path / "data"),
        "MAC_MASTER_BIND": "0.0.0.0",
        "MAC_PUBLIC_HOST": "mac.example.test",
        "PATH": "/usr/bin:/bin",
    }
    specs = {spec.name: spec for spec in master_specs(NodeConfig.load(environ=environ))}

    assert specs["proxy"].bind == "0.0.0.0"
    for name in ("api-server", "prometheus", "alertmanager"):
        assert specs[name].bind == "127.0.0.1", name
    prometheus, alertmanager = specs["prometheus"].argv, specs["alertmanager"].argv
    assert "--web.listen-address=127.0.0.1:29090" in prometheus
    assert "--web.listen-address=127.0.0.1:29093" in alertmanager
    assert not any("lifecycle" in arg for arg in prometheus)
    public = "https://mac.example.test:28443"  # people's pages are served over HTTPS
    assert specs["api-server"].env["MAC_PUBLIC_URL"] == public
    assert f"--web.external-url={public}/prometheus/" in prometheus
    assert f"--web.external-url={public}/alertmanager/" in alertmanager
    # (prepare_tls runs first; then proxy_config renders nginx.conf.)
    proxy_config = next(cmd for cmd in specs["proxy"].prestart if "proxy_config" in cmd)
    assert proxy_config[proxy_config.index("--prometheus") + 1] == "127.0.0.1:29090"
    assert proxy_config[proxy_config.index("--alertmanager") + 1] == "127.0.0.1:29093"


def test_under_compose_the_host_asks_redis_the_api_server_and_the_worker_in_their_containers():
    """They publish no port: `mac status master` runs each container's own check."""
    from maccli.master.layout import docker_layout

    cfg = NodeConfig.load(environ={"PATH": "/usr/bin:/bin", "SLURM_CONF": "/nonexistent"})
    specs = {spec.name: spec for spec in master_specs(cfg, docker_layout(cfg))}
    assert specs["redis"].health_command == ["docker", "exec", "mac-redis", "redis-cli", "ping"]
    assert specs["api-server"].health_command == [
        "docker", "exec", "mac-api-server", "curl", "-fsS", "-o", "/dev/null",
        "http://127.0.0.1:28080/health",
    ]  # fmt: skip
    worker = specs["worker"].health_command
    assert worker[:5] == ["docker", "exec", "mac-worker", "sh", "-c"]
    assert worker[5].endswith('inspect ping -t 2 -d "mac-worker@$HOSTNAME"')
