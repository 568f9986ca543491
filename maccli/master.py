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

from contract.pinning import first_certificate, spki_sha256
from contract.services import (
    MASTER_ALERTMANAGER_PORT,
    MASTER_API_PORT,
    MASTER_PROMETHEUS_PORT,
    MASTER_TLS_PORT,
)
from maccli import output, scaleout
from maccli.agent import print_states
from maccli.output import CliError
from maccli.runtimes import ServiceSpec, choose_runtime
from maccli.runtimes.base import Runtime
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.process import ProcessRuntime
from node.config import NODE_KEY, ConfigError, NodeConfig, Source

ROLE = "master"
REPO_ROOT = Path(__file__).resolve().parents[1]
# The API server's own port behind the proxy, which alone listens on MAC_MASTER_PORT.
API_INTERNAL_PORT = 28081
# Where the master's own servers listen: only the proxy faces other hosts (issue 22);
# Prometheus and Alertmanager are served to people through it, under /prometheus/ and
# /alertmanager/, and stay reachable at the root on the master itself.
LOOPBACK = "127.0.0.1"
# Each port the master listens on, by the setting that moves it: a second master on one
# host, or a test beside a running master, moves them all.
PORT_SETTINGS = {
    "MAC_MASTER_PORT": MASTER_API_PORT,
    "MAC_TLS_PORT": MASTER_TLS_PORT,
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


def alertmanager_spec(cfg: NodeConfig, data: Path, env: dict[str, str]) -> ServiceSpec:
    """Debian's prometheus-alertmanager on the loopback's 29093, its configuration written
    from the notification channels just before it starts (alerting.amconfig)."""
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
        f"--web.listen-address={LOOPBACK}:{port}",
        # The links it makes point at the front door; its routes stay at the root.
        f"--web.external-url={env['MAC_PUBLIC_URL']}/alertmanager/",
        "--web.route-prefix=/",
        # One Alertmanager: no gossip port (9094 by default) to collide with a site's.
        "--cluster.listen-address=",
    ]
    return _prometheus_project_spec("alertmanager", argv, port, env, prestart)


def _prometheus_project_spec(
    name: str,
    argv: list[str],
    port: int,
    env: dict[str, str],
    prestart: list[list[str]],
) -> ServiceSpec:
    """A Prometheus-project server on the loopback: ready when its /-/ready answers,
    which can take a while on a first start (the TSDB or the notification log is set up)."""
    return ServiceSpec(
        name,
        argv,
        port=port,
        liveness_path="/-/ready",
        env=env,
        prestart=prestart,
        ready_timeout=60,
        host=LOOPBACK,
        bind=LOOPBACK,
    )


def tls_port(cfg: NodeConfig) -> int:
    """HTTPS of the proxy, beside HTTP on MAC_MASTER_PORT."""
    return cfg.int_value("MAC_TLS_PORT", MASTER_TLS_PORT)


def tls_dir(cfg: NodeConfig) -> Path:
    """The same default as macweb.settings.TLS_DIR."""
    return Path(cfg.get("MAC_TLS_DIR") or data_dir(cfg) / "tls").expanduser().resolve()


def tls_names(cfg: NodeConfig) -> list[str]:
    """What agents may call the master, for its server certificate (with MAC_TLS_NAMES and
    loopback, which prepare_tls adds)."""
    bind = cfg.get("MAC_MASTER_BIND") or "0.0.0.0"
    names = [_public_host(cfg), socket.gethostname(), socket.getfqdn()]
    if bind not in {"0.0.0.0", "::"}:
        names.append(bind)
    return list(dict.fromkeys(name for name in names if name))


def http_mode(cfg: NodeConfig) -> str:
    """MAC_HTTP, checked before anything starts (macweb.settings reads it too)."""
    mode = (cfg.get("MAC_HTTP") or "on").strip().lower()
    if mode not in {"on", "off", "redirect"}:
        raise ConfigError(f"MAC_HTTP={mode!r}: use on, off or redirect (docs/tls.md).")
    return mode


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
        "MAC_PROMETHEUS_URL": cfg.get("MAC_PROMETHEUS_URL") or f"http://{LOOPBACK}:{prom_port}",
        "MAC_ALERTMANAGER_URL": site_alertmanager or f"http://{LOOPBACK}:{alertmanager_port(cfg)}",
        "MAC_ALERTMANAGER_DIR": cfg.get("MAC_ALERTMANAGER_DIR") or str(data / "alertmanager"),
        "MAC_ALERTMANAGER_MANAGED": cfg.get("MAC_ALERTMANAGER_MANAGED")
        or ("0" if site_alertmanager else "1"),
        "MAC_PUBLIC_URL": public_url(cfg),
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
                # Over the proxy's HTTPS, trusting the master's CA (or the site's top).
                "--master", f"{probe_host}:{tls_port(cfg)}",
                "--ca-file", str(tls_dir(cfg) / "ca.pem"),
            ]
        )  # fmt: skip
    proxy_dir = data / "proxy"
    proxy_conf = proxy_dir / "nginx.conf"
    # The CA (first start) and server certificate, then nginx.conf with HTTPS beside HTTP.
    tls_prestart = [*django, "prepare_tls"]
    for name in tls_names(cfg):
        tls_prestart += ["--name", name]
    proxy_prestart = [
        *django, "proxy_config", "--out", str(proxy_conf),
        "--listen", f"{bind}:{api_port}", "--upstream", f"{LOOPBACK}:{internal_port}",
        "--tls-listen", f"{bind}:{tls_port(cfg)}",
        "--prometheus", f"{LOOPBACK}:{prom_port}",
    ]  # fmt: skip
    if not site_alertmanager:
        proxy_prestart += ["--alertmanager", f"{LOOPBACK}:{alertmanager_port(cfg)}"]
    # MAC_HTTP=off keeps HTTP on loopback only, where the health check asks.
    proxy_host = "127.0.0.1" if http_mode(cfg) == "off" else probe_host
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
            prestart=[tls_prestart, proxy_prestart],
            ready_timeout=90,
            host=proxy_host,
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
                f"--web.listen-address={LOOPBACK}:{prom_port}",
                f"--storage.tsdb.path={prom_dir / 'data'}",
                # No --web.enable-lifecycle: nothing of MAC's reloads or stops it over
                # HTTP (a changed config comes with a restart), so /-/quit stays closed.
                f"--web.external-url={env['MAC_PUBLIC_URL']}/prometheus/",
                "--web.route-prefix=/",
            ],
            prom_port,
            env,
            prom_prestart,
        ),
    ]
    if not site_alertmanager:
        specs.append(alertmanager_spec(cfg, data, env))
    if scaleout.shards(cfg):
        # Scale-out mode (MAC_SCRAPE_SHARDS, docs/scaling.md): scrapers, store and rules
        # replace mac-prometheus, and every process reads metrics from the store.
        if docker:
            layout = scaleout.docker_layout(cfg)
        else:
            layout = scaleout.process_layout(
                data, master=f"{probe_host}:{api_port}",
                alertmanager_url=env["MAC_ALERTMANAGER_URL"], views_port=prom_port,
            )  # fmt: skip
            env.update(scaleout.env_overrides(cfg, layout))
            env["MAC_SD_TOKEN"] = scaleout.sd_token(cfg, data)
        specs = [spec for spec in specs if spec.name != "prometheus"]
        specs += scaleout.specs(
            cfg, layout, env, views_port=prom_port, project_spec=_prometheus_project_spec
        )
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


def _pass_tls_names(cfg: NodeConfig) -> None:
    """The Compose proxy cannot see this host's names: its certificate gets them here
    (docker-compose.master.yml reads MAC_TLS_HOST_NAMES)."""
    os.environ["MAC_TLS_HOST_NAMES"] = ",".join(tls_names(cfg))


def public_url(cfg: NodeConfig) -> str:
    """The front door as people reach it (MAC_PUBLIC_URL, else derived from the master's
    address and port): the links in notifications and the servers' external URLs.
    The same under both runtimes."""
    given = (cfg.get("MAC_PUBLIC_URL") or "").rstrip("/")
    if given:
        return given
    # With plain HTTP refused or redirected, links go to HTTPS (the master's CA signs it).
    if http_mode(cfg) == "on":
        return f"http://{_public_host(cfg)}:{cfg.master_port}"
    return f"https://{_public_host(cfg)}:{tls_port(cfg)}"


def _export_public_url(cfg: NodeConfig) -> None:
    """Compose takes ${MAC_PUBLIC_URL} from mac's environment: give it the derived one,
    as the process runtime gives it to its services."""
    os.environ["MAC_PUBLIC_URL"] = public_url(cfg)


def _specs(cfg: NodeConfig, runtime: Runtime) -> list[ServiceSpec]:
    return master_specs(cfg, docker=not isinstance(runtime, ProcessRuntime))


def _compose_scaleout(cfg: NodeConfig, runtime: Runtime, specs: list[ServiceSpec]) -> None:
    """Under Docker, scale-out mode is one more Compose file, written from the engines'
    specs; the engines' containers of another setting (fewer scrapers, or none) go."""
    if not isinstance(runtime, DockerRuntime):
        return
    wanted = {spec.name for spec in specs}
    runtime.prune(lambda service: scaleout.is_engine(service) and service not in wanted)
    if not scaleout.shards(cfg):
        runtime.overlays = []
        return
    data = data_dir(cfg)
    layout = scaleout.docker_layout(cfg)
    engines = [s for s in specs if scaleout.is_engine(s.name) or s.name == "prometheus"]
    overlay = scaleout.compose_overlay(engines, scaleout.env_overrides(cfg, layout))
    runtime.overlays = [scaleout.write_overlay(data, overlay)]
    # The token reaches the containers through Compose's environment, never the file.
    os.environ["MAC_SD_TOKEN"] = scaleout.sd_token(cfg, data)


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
        _pass_tls_names(cfg)
        _export_public_url(cfg)
        _compose_scaleout(cfg, runtime, specs)
        states = runtime.start(ROLE, specs)
    print_states(states, f"Master services ({runtime.name} runtime)")
    host = _public_host(cfg)
    api = public_url(cfg)
    lines = [
        f"Dashboard:   {api}/",
        f"API docs:    {api}/api/v1/docs/",
        f"Health:      curl {api}/health",
        f"Prometheus:  {api}/prometheus/targets (log in first; on this host also "
        f"http://127.0.0.1:{prometheus_port(cfg)}/)",
        "Alerts:      "
        + (
            f"{api}/alertmanager/ (channels: {api}/admin/alerting/)"
            if not cfg.get("MAC_ALERTMANAGER_URL")
            else f"{cfg.get('MAC_ALERTMANAGER_URL')} (the site's Alertmanager)"
        ),
    ]
    if scaleout.shards(cfg):
        # Scale-out mode: where the metrics are, and who scrapes them.
        lines.append(
            f"Metrics:     store {scaleout.store_url(cfg)}, {scaleout.shards(cfg)} scrapers "
            "(mac status master), merged targets on the Prometheus URL"
        )
        if isinstance(runtime, DockerRuntime):
            lines += [f"             Compose file: {path}" for path in runtime.overlays]
    if admin:
        lines.append(f"Admin:       {admin}")
    elif runtime.name == "docker":
        lines.append("Admin:       docker logs mac-api-server 2>&1 | grep -i 'admin user'")
    lines += join_lines(cfg, runtime, host)
    for line in lines:
        output.say(line)
    output.ok("Master started.")
    return 0


# Where the Compose master's proxy keeps the CA (docker/docker-compose.master.yml).
DOCKER_CA = "/var/lib/mac-tls/ca.pem"


def _ca_pem(cfg: NodeConfig, runtime: Runtime) -> bytes:
    if isinstance(runtime, ProcessRuntime):
        return (tls_dir(cfg) / "ca.pem").read_bytes()
    result = subprocess.run(
        ["docker", "exec", "mac-proxy", "cat", DOCKER_CA],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if result.returncode != 0:
        raise OSError(result.stderr.decode(errors="replace").strip() or "docker exec failed")
    return result.stdout


def join_lines(cfg: NodeConfig, runtime: Runtime, host: str) -> list[str]:
    """How agents join: over HTTPS with the CA's pin (kubeadm's CA hash), and without."""
    url_host = f"[{host}]" if ":" in host else host
    try:
        pin = spki_sha256(first_certificate(_ca_pem(cfg, runtime)))
    except (OSError, ValueError) as exc:
        output.warn(f"could not read the master's CA for the join line: {exc}")
        pin = "<on the master: mac start master prints it again>"
    lines = [
        f"Agents join: mac env set MASTER_URL=https://{url_host}:{tls_port(cfg)} && "
        f"mac env set MAC_MASTER_CA_SHA256={pin} && mac start agent"
    ]
    if http_mode(cfg) == "on":
        lines.append(f"  (unverified, plain HTTP: mac env set MASTER_IP={host} && mac start agent)")
    return lines


def stop(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name)
    specs = _specs(cfg, runtime)
    _compose_scaleout(cfg, runtime, specs)
    states = runtime.stop(ROLE, specs)
    still = [s.name for s in states if s.running]
    if still:
        raise CliError(f"still running: {', '.join(still)}", commands=["mac status master"])
    output.ok(f"Stopped the master ({runtime.name} runtime).")
    return 0


def restart(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name, remove_stale=remove_stale)
    specs = _specs(cfg, runtime)
    if not isinstance(runtime, ProcessRuntime):
        _pass_tls_names(cfg)
        _export_public_url(cfg)
        _compose_scaleout(cfg, runtime, specs)
    states = runtime.restart(ROLE, specs)
    print_states(states, f"Master services ({runtime.name} runtime)")
    return 0


def status(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name)
    states = runtime.status(ROLE, _specs(cfg, runtime))
    print_states(states, f"Master services ({runtime.name} runtime)")
    if scaleout.shards(cfg):
        # Each scraper's share, from its own targets (MAC_SCRAPE_SHARDS).
        output.say("Scrapers (share of the fleet, from each scraper's /api/v1/targets):")
        for name, share in scaleout.scraper_shares(cfg):
            output.say(f"  {name}: {share}")
    healthy = all(s.running and s.health in ("ok", "-") for s in states)
    return 0 if healthy else 1
