"""`mac start|stop|restart|status master`: api-server, worker, beat, Prometheus, Alertmanager.

Under the process runtime the master's set-up runs first (prepare_master, migrate,
collectstatic, the admin user, Prometheus's configuration); under Docker the images
do it.
These commands run on the master, but they still start Django only in child
processes: `mac` itself never loads the settings.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from contract.services import MASTER_ALERTMANAGER_PORT, MASTER_API_PORT, MASTER_PROMETHEUS_PORT
from maccli import output
from maccli.agent import print_states
from maccli.output import CliError
from maccli.runtimes import ServiceSpec, choose_runtime
from maccli.runtimes.base import Runtime
from maccli.runtimes.process import ProcessRuntime
from node.config import NODE_KEY, NodeConfig, Source

ROLE = "master"
REPO_ROOT = Path(__file__).resolve().parents[1]
# The API server's own port behind the proxy, which alone listens on MAC_MASTER_PORT.
API_INTERNAL_PORT = 28081
# Each port the master listens on, by the setting that moves it: a second master on one
# host, or a test beside a running master, moves them all.
PORT_SETTINGS = {
    "MAC_MASTER_PORT": MASTER_API_PORT,
    "MAC_API_INTERNAL_PORT": API_INTERNAL_PORT,
    "MAC_PROMETHEUS_PORT": MASTER_PROMETHEUS_PORT,
    "MAC_ALERTMANAGER_PORT": MASTER_ALERTMANAGER_PORT,
}


def data_dir(cfg: NodeConfig) -> Path:
    # The same default as macweb.settings.DATA_DIR (./var of the checkout).
    return Path(cfg.get("MAC_DATA_DIR") or REPO_ROOT / "var").expanduser().resolve()


def _has_command(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def prometheus_port(cfg: NodeConfig) -> int:
    return cfg.int_value("MAC_PROMETHEUS_PORT", MASTER_PROMETHEUS_PORT)


def alertmanager_port(cfg: NodeConfig) -> int:
    return cfg.int_value("MAC_ALERTMANAGER_PORT", MASTER_ALERTMANAGER_PORT)


def alertmanager_spec(
    cfg: NodeConfig, data: Path, env: dict[str, str], bind: str, probe_host: str
) -> ServiceSpec:
    """Debian's prometheus-alertmanager on 29093, its configuration written from the
    notification channels just before it starts (alerting.amconfig)."""
    port = alertmanager_port(cfg)
    directory = Path(env["MAC_ALERTMANAGER_DIR"])
    django = [sys.executable, "-m", "django"]
    prestart = []
    if _has_command("alerting.management.commands.alertmanager_config"):
        prestart = [[*django, "alert_channels_from_env"], [*django, "alertmanager_config"]]
    argv = [
        cfg.get("MAC_ALERTMANAGER_BIN") or "/usr/bin/prometheus-alertmanager",
        f"--config.file={directory / 'alertmanager.yml'}",
        f"--storage.path={data / 'alertmanager-data'}",
        f"--web.listen-address={bind}:{port}",
        # One Alertmanager: no gossip port (9094 by default) to collide with a site's.
        "--cluster.listen-address=",
    ]
    return _prometheus_project_spec("alertmanager", argv, port, env, prestart, probe_host, bind)


def _prometheus_project_spec(
    name: str,
    argv: list[str],
    port: int,
    env: dict[str, str],
    prestart: list[list[str]],
    probe_host: str,
    bind: str,
) -> ServiceSpec:
    """A Prometheus-project server: ready when its /-/ready answers, which can take a
    while on a first start (the TSDB or the notification log is set up)."""
    return ServiceSpec(
        name,
        argv,
        port=port,
        liveness_path="/-/ready",
        env=env,
        prestart=prestart,
        ready_timeout=60,
        host=probe_host,
        bind=bind,
    )


def api_internal_port(cfg: NodeConfig) -> int:
    """Where the API server listens behind the proxy (127.0.0.1 only)."""
    return cfg.int_value("MAC_API_INTERNAL_PORT", API_INTERNAL_PORT)


def file_settings(cfg: NodeConfig) -> dict[str, str]:
    """What the env files set and the process environment does not, but the agent's key."""
    return {
        key: value
        for key, (value, source) in cfg.merged().items()
        if source in (Source.NODE, Source.USER) and key != NODE_KEY
    }


def worker_name() -> str:
    """The master's Celery worker's node name, which its health check pings."""
    return f"mac-worker@{socket.gethostname()}"


def master_specs(cfg: NodeConfig, *, docker: bool = False) -> list[ServiceSpec]:
    """The master's services. Under Docker the API server has no port of its own on the
    host (only mac-proxy publishes one), and the containers' health checks stand in for
    the commands that `mac` runs itself under the process runtime."""
    py = sys.executable
    data = data_dir(cfg)
    bind = cfg.get("MAC_MASTER_BIND") or "0.0.0.0"
    probe_host = "127.0.0.1" if bind in {"0.0.0.0", "::"} else bind
    api_port, prom_port = cfg.master_port, prometheus_port(cfg)
    # A site's own Alertmanager (MAC_ALERTMANAGER_URL) replaces MAC's: none runs here.
    site_alertmanager = cfg.get("MAC_ALERTMANAGER_URL")
    internal_port = api_internal_port(cfg)
    broker = (
        cfg.get("MAC_CELERY_BROKER_URL") or cfg.get("MAC_REDIS_URL") or "redis://127.0.0.1:6379/0"
    )
    env = {
        # The env files' settings (`mac env set MAC_PROBE_INTERVAL=10` on the master), as
        # under Docker; the process environment still wins, and the values below, which
        # the services must agree on, are set from the same configuration.
        **file_settings(cfg),
        "DJANGO_SETTINGS_MODULE": "macweb.settings",
        "MAC_DATA_DIR": str(data),
        "MAC_PROMETHEUS_URL": cfg.get("MAC_PROMETHEUS_URL") or f"http://{probe_host}:{prom_port}",
        "MAC_ALERTMANAGER_URL": site_alertmanager
        or f"http://{probe_host}:{alertmanager_port(cfg)}",
        "MAC_ALERTMANAGER_DIR": cfg.get("MAC_ALERTMANAGER_DIR") or str(data / "alertmanager"),
        "MAC_ALERTMANAGER_MANAGED": cfg.get("MAC_ALERTMANAGER_MANAGED")
        or ("0" if site_alertmanager else "1"),
        "MAC_PUBLIC_URL": cfg.get("MAC_PUBLIC_URL") or f"http://{_public_host(cfg)}:{api_port}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    django = [py, "-m", "django"]
    api_prestart = [
        # First: the data folder and the secret key every master process reads.
        [*django, "prepare_master"],
        # Without the statement timeout of the serving processes: a migration of a
        # large table may take longer (macweb.db_deadline).
        ["env", "MAC_DB_STATEMENT_TIMEOUT=0", *django, "migrate", "--noinput"],
        [*django, "collectstatic", "--noinput"],
    ]
    prom_dir = data / "prometheus"
    prom_config = prom_dir / "prometheus.yml"
    prom_prestart = []
    if _has_command("healthcheck.management.commands.prometheus_config"):
        prom_prestart.append(
            [
                *django, "prometheus_config", "--out", str(prom_config),
                "--master", f"{probe_host}:{api_port}",
            ]
        )  # fmt: skip
    proxy_dir = data / "proxy"
    proxy_conf = proxy_dir / "nginx.conf"
    proxy_prestart = [
        *django, "proxy_config", "--out", str(proxy_conf),
        "--listen", f"{bind}:{api_port}", "--upstream", f"127.0.0.1:{internal_port}",
    ]  # fmt: skip
    specs = [
        ServiceSpec(
            "api-server",
            [
                py,
                "-m",
                "gunicorn",
                "macweb.asgi:application",
                # Worker class and timeouts: one file for every runtime.
                "-c",
                "python:macweb.gunicorn_conf",
                # Loopback only: clients reach it through the proxy.
                "--bind",
                f"127.0.0.1:{internal_port}",
                "--workers",
                cfg.get("MAC_API_WORKERS") or "2",
                "--access-logfile",
                "-",
            ],
            port=None if docker else internal_port,
            liveness_path="/health",
            env=env,
            prestart=api_prestart,
            ready_timeout=90,
            host="127.0.0.1",
            bind="127.0.0.1",
        ),
        # nginx in front of the API server: slow clients, header and body sizes,
        # connection caps, client addresses (macweb/proxy.py, docs/security.md).
        ServiceSpec(
            "proxy",
            [
                cfg.get("MAC_NGINX_BIN") or "/usr/sbin/nginx",
                "-p",
                str(proxy_dir),
                "-c",
                str(proxy_conf),
                "-e",
                "stderr",
            ],
            port=api_port,
            liveness_path="/health",
            env=env,
            prestart=[proxy_prestart],
            ready_timeout=90,
            host=probe_host,
            bind=bind,
        ),
        ServiceSpec(
            "worker",
            # No -Q: the worker consumes every queue of the settings' CELERY_TASK_QUEUES,
            # Celery's default and MAC_PROBE_QUEUE, so chunk tasks are never left unconsumed.
            [
                py,
                "-m",
                "celery",
                "-A",
                "macweb",
                "worker",
                "-l",
                "INFO",
                "--concurrency",
                cfg.get("MAC_WORKER_CONCURRENCY") or "2",
                "-n",
                worker_name(),
            ],
            env=env,
            # Its own answer: a ping through the broker, without loading Django.
            health_command=None
            if docker
            else [
                py,
                "-m",
                "celery",
                "-b",
                broker,
                "inspect",
                "ping",
                "-d",
                worker_name(),
                "-t",
                "2",
            ],
        ),
        ServiceSpec(
            "beat",
            [
                py,
                "-m",
                "celery",
                "-A",
                "macweb",
                "beat",
                "-l",
                "INFO",
                "-s",
                str(data / "celerybeat-schedule"),
                "--pidfile=",
            ],
            env=env,
        ),
        _prometheus_project_spec(
            "prometheus",
            [
                cfg.get("MAC_PROMETHEUS_BIN") or "/usr/bin/prometheus",
                f"--config.file={prom_config}",
                f"--web.listen-address={bind}:{prom_port}",
                f"--storage.tsdb.path={prom_dir / 'data'}",
                "--web.enable-lifecycle",
            ],
            prom_port,
            env,
            prom_prestart,
            probe_host,
            bind,
        ),
    ]
    if not site_alertmanager:
        specs.append(alertmanager_spec(cfg, data, env, bind, probe_host))
    return specs


def _redis_answers(url: str) -> tuple[bool, str]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
    except OSError as exc:
        return False, f"{host}:{port}: {exc.strerror or exc}"
    return answer.startswith((b"+PONG", b"-NOAUTH")), f"{host}:{port}"


def _create_admin(cfg: NodeConfig, specs: list[ServiceSpec]) -> str:
    if not _has_command("inventory.management.commands.createadmin"):
        return ""
    env = {**os.environ, **specs[0].env}
    result = subprocess.run(
        [sys.executable, "-m", "django", "createadmin"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise CliError(
            f"createadmin failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}",
            commands=["python -m django createadmin"],
        )
    return result.stdout.strip()


def _host_address() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent
            return sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _public_host(cfg: NodeConfig) -> str:
    """The master's address as agents and people reach it."""
    bind = cfg.get("MAC_MASTER_BIND") or "0.0.0.0"
    wildcard = bind in {"0.0.0.0", "::"}
    return cfg.get("MAC_PUBLIC_HOST") or (_host_address() if wildcard else bind)


def _specs(cfg: NodeConfig, runtime: Runtime) -> list[ServiceSpec]:
    return master_specs(cfg, docker=not isinstance(runtime, ProcessRuntime))


def start(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name, remove_stale=remove_stale)
    specs = _specs(cfg, runtime)
    admin = ""
    if isinstance(runtime, ProcessRuntime):
        redis_url = cfg.get("MAC_REDIS_URL") or "redis://127.0.0.1:6379/0"
        ok, where = _redis_answers(redis_url)
        if not ok:
            raise CliError(
                f"Redis does not answer at {where} (MAC_REDIS_URL): the worker and the live "
                "dashboard need it.",
                hint="Start Redis (scripts/bootstrap does it), then run again:",
                commands=["sudo systemctl start redis-server", "mac start master"],
            )
        states = runtime.start(ROLE, specs)
        admin = _create_admin(cfg, specs)
    else:
        states = runtime.start(ROLE, specs)
    print_states(states, f"Master services ({runtime.name} runtime)")
    host = _public_host(cfg)
    api, prom = f"http://{host}:{cfg.master_port}", f"http://{host}:{prometheus_port(cfg)}"
    lines = [
        f"Dashboard:   {api}/",
        f"API docs:    {api}/api/v1/docs/",
        f"Health:      curl {api}/health",
        f"Prometheus:  {prom}/targets",
        "Alerts:      "
        + (
            f"http://{host}:{alertmanager_port(cfg)}/ (channels: {api}/admin/alerting/)"
            if not cfg.get("MAC_ALERTMANAGER_URL")
            else f"{cfg.get('MAC_ALERTMANAGER_URL')} (the site's Alertmanager)"
        ),
    ]
    if admin:
        lines.append(f"Admin:       {admin}")
    elif runtime.name == "docker":
        lines.append("Admin:       docker logs mac-api-server 2>&1 | grep -i 'admin user'")
    lines.append(f"Agents join: mac env set MASTER_IP={host} && mac start agent")
    for line in lines:
        output.say(line)
    output.ok("Master started.")
    return 0


def stop(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name)
    states = runtime.stop(ROLE, _specs(cfg, runtime))
    still = [s.name for s in states if s.running]
    if still:
        raise CliError(f"still running: {', '.join(still)}", commands=["mac status master"])
    output.ok(f"Stopped the master ({runtime.name} runtime).")
    return 0


def restart(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name, remove_stale=remove_stale)
    states = runtime.restart(ROLE, _specs(cfg, runtime))
    print_states(states, f"Master services ({runtime.name} runtime)")
    return 0


def status(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name)
    states = runtime.status(ROLE, _specs(cfg, runtime))
    print_states(states, f"Master services ({runtime.name} runtime)")
    healthy = all(s.running and s.health in ("ok", "-") for s in states)
    return 0 if healthy else 1
