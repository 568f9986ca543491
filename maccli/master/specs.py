"""The master's services as specs, once for both runtimes: api-server, proxy, worker,
beat, Prometheus and Alertmanager (or scale-out mode's engines in Prometheus's place,
scaleout.py), each with the commands that prepare it, and under Compose mac-redis (the
process runtime uses the host's Redis).

A Layout (layout.py) says where they run: the process runtime runs the specs of this
host's loopback as they are; docker/docker-compose.master.yml is written from the specs
of the master's Compose network (compose.py). A flag of Prometheus changed here
changes both. `mac` itself never loads Django's settings: the commands here run in
the services' own processes.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from maccli.master import scaleout
from maccli.master.layout import DOCKER_REDIS_URL, Layout, master_layout
from maccli.master.preflight import (
    LOOPBACK,
    REPO_ROOT,
    alertmanager_port,
    bind,
    check_drain_settings,
    file_settings,
    has_command,
    http_mode,
    probe_host,
    prometheus_port,
    tls_names,
    worker_name,
)
from maccli.runtimes import ServiceSpec
from node.config import NodeConfig

__all__ = ["Layout", "master_layout", "master_specs"]

# Prometheus's flags beside its files and addresses. No --web.enable-lifecycle: nothing
# of MAC's reloads or stops it over HTTP (a changed config comes with a restart), so
# /-/quit stays closed. Its links point at the front door; its routes stay at the root.
PROMETHEUS_FLAGS = ["--web.route-prefix=/"]
# Alertmanager's: its routes at the root, and no gossip port (9094 by default) to
# collide with a site's: there is one Alertmanager.
ALERTMANAGER_FLAGS = ["--web.route-prefix=/", "--cluster.listen-address="]
# Under Compose, what createadmin said at the api-server's starts (the generated admin
# password among it), in the data volume, readable by root alone: never in the container's
# log, which Docker keeps (and a log driver ships) for the container's lifetime. `mac
# start master` prints it and removes it (access.admin_said), as the process runtime
# prints createadmin's own answer.
ADMIN_SAID = "createadmin.txt"


# What each service's start steps need of the others' (the process runtime runs the rest
# side by side; the Compose containers wait for the same files, compose.WAITS). The
# proxy's CA and nginx.conf need nothing of the master's (under Compose it has no data
# folder); the alert channels need the database that the api-server's steps migrate;
# Prometheus's configuration and the scale-out engines' files the metrics token of its
# prepare_master and the proxy's CA.
PRESTART_AFTER = {
    "api-server": (),
    "proxy": (),
    "alertmanager": ("api-server",),
    "*": ("api-server", "proxy"),
}


def project_spec(
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


def _program(cfg: NodeConfig, layout: Layout, setting: str, path: str) -> str:
    """A server's program: Debian's in MAC's image, or MAC_*_BIN on this host."""
    return path if layout.docker else (cfg.get(setting) or path)


def _environment(cfg: NodeConfig, layout: Layout) -> dict[str, str]:
    """What every master process must agree on. Under Compose the containers' own
    environment (compose.py) says it instead: the settings pass through by name."""
    if layout.docker:
        return {}
    site_alertmanager = cfg.get("MAC_ALERTMANAGER_URL")
    return {
        # The env files' settings (`mac env set MAC_PROBE_INTERVAL=10` on the master), as
        # under Docker; the process environment still wins, and the values below, which
        # the services must agree on, are set from the same configuration.
        **file_settings(cfg),
        "DJANGO_SETTINGS_MODULE": "macweb.settings",
        "MAC_DATA_DIR": str(layout.data),
        "MAC_PROMETHEUS_URL": cfg.get("MAC_PROMETHEUS_URL")
        or f"http://{LOOPBACK}:{layout.prometheus_port}",
        "MAC_ALERTMANAGER_URL": layout.alertmanager_url,
        "MAC_ALERTMANAGER_DIR": str(layout.alertmanager_dir),
        "MAC_ALERTMANAGER_MANAGED": cfg.get("MAC_ALERTMANAGER_MANAGED")
        or ("0" if site_alertmanager else "1"),
        "MAC_PUBLIC_URL": layout.public_url,
        # What agents call the master: its allowed hosts (macweb.hosts), as on the certificate.
        "MAC_TLS_HOST_NAMES": ",".join(tls_names(cfg)),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }


def master_specs(cfg: NodeConfig, layout: Layout | None = None) -> list[ServiceSpec]:
    """The master's services, where `layout` says (this host's loopback by default).

    A spec's port, host and liveness say how this host reaches the service (under
    Compose: the port published on its loopback; the API server has none, only
    mac-proxy faces other hosts); its command line, how the service runs where the
    layout puts it. Under Compose, a service this host cannot ask over a port (the API
    server, the worker, mac-redis) answers through its container's own check
    (container_check, run with `docker exec`), and the api-server's container makes
    the admin user, which `mac` makes itself under the process runtime.
    """
    layout = layout or master_layout(cfg)
    docker = layout.docker
    check_drain_settings(cfg)
    py = layout.python
    data = layout.data
    # A site's own Alertmanager (MAC_ALERTMANAGER_URL) replaces MAC's: none runs here.
    own_alertmanager = not cfg.get("MAC_ALERTMANAGER_URL")
    env = _environment(cfg, layout)
    django = layout.django
    api_prestart = [
        # First: the data folder and the secret key every master process reads.
        django("prepare_master"),
        # Without the statement timeout of the serving processes: a migration of a
        # large table may take longer (macweb.db_deadline).
        ["env", "MAC_DB_STATEMENT_TIMEOUT=0", *django("migrate", "--noinput")],
        # MAC's own steps skip Django's system checks (a second each); Django's own is
        # told to: the migrate before it ran them for the whole start.
        django("collectstatic", "--noinput", "--skip-checks"),
    ]
    alertmanager_prestart = []
    if has_command("alerting.management.commands.alertmanager_config"):
        alertmanager_prestart = [
            django("alert_channels_from_env"),
            django("alertmanager_config"),
        ]
    if docker:
        # In the api-server's container: the admin user (mac makes it on this host), what
        # it says kept for `mac start master` alone (ADMIN_SAID), and alertmanager.yml
        # from the channels, which mac-alertmanager waits for. Appended: a container that
        # restarts before `mac` read the file keeps the password made before.
        said = shlex.quote(str(data / ADMIN_SAID))
        api_prestart.append(
            ["sh", "-c", f"umask 077 && {shlex.join(django('createadmin'))} >> {said}"]
        )
        api_prestart += alertmanager_prestart if own_alertmanager else []
        alertmanager_prestart = []
    prom_dir = Path("/tmp/mac-prometheus") if docker else data / "prometheus"
    prom_config = prom_dir / "prometheus.yml"
    prom_prestart = []
    if has_command("scraping.management.commands.prometheus_config"):
        # The configuration and rules MAC writes from its settings (MAC_SCRAPE_INTERVAL,
        # MAC_ALERT_FOR, MAC_RUNBOOK_BASE_URL, MAC_METRICS_TOKEN), under both runtimes.
        prom_prestart.append(
            django(
                "prometheus_config", "--out", str(prom_config),
                # Over the proxy's HTTPS, trusting the master's CA (or the site's top).
                "--master", f"{layout.front}:{layout.https_port}",
                "--ca-file", str(layout.tls / "ca.pem"),
            )
        )  # fmt: skip
    proxy_dir = Path("/tmp/mac-proxy") if docker else data / "proxy"
    proxy_conf = proxy_dir / "nginx.conf"
    # The CA (first start) and server certificate, then nginx.conf with HTTPS beside HTTP.
    # Under Compose the names come from `mac` at each start (MAC_TLS_HOST_NAMES).
    names = ["mac-proxy", "${MAC_TLS_HOST_NAMES:-}"] if docker else tls_names(cfg)
    tls_prestart = django("prepare_tls", *[arg for name in names for arg in ("--name", name)])
    listen = layout.listen if docker else bind(cfg)
    proxy_args = [
        "--out", str(proxy_conf),
        "--listen", f"{listen}:{layout.http_port}",
        "--upstream", f"{layout.host('api-server')}:{layout.api_port}",
        "--tls-listen", f"{listen}:{layout.https_port}",
        "--prometheus", f"{layout.host('prometheus')}:{layout.prometheus_port}",
    ]  # fmt: skip
    if own_alertmanager:
        alertmanager = f"{layout.host('alertmanager')}:{layout.alertmanager_port}"
        proxy_args += ["--alertmanager", alertmanager]
    if docker:
        # Docker's DNS, asked as nginx goes: a recreated container is found.
        proxy_args += ["--resolver", "127.0.0.11"]
    proxy_prestart = django("proxy_config", *proxy_args)
    # MAC_HTTP=off keeps HTTP on loopback only, where the health check asks.
    proxy_host = LOOPBACK if http_mode(cfg) == "off" else probe_host(cfg)
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
                # Loopback only on the host: clients reach it through the proxy.
                "--bind",
                f"{layout.listen}:{layout.api_port}",
                "--workers",
                cfg.get("MAC_API_WORKERS") or "2",
                "--access-logfile",
                "-",
            ],
            port=None if docker else layout.api_port,
            liveness_path="/health",
            env=env,
            prestart=api_prestart,
            health_command=_in_container("api-server", layout) if docker else None,
            ready_timeout=90,
            host=LOOPBACK,
            bind=LOOPBACK,
        ),
        # nginx in front of the API server: slow clients, header and body sizes,
        # connection caps, client addresses (macweb/proxy.py, docs/security.md).
        ServiceSpec(
            "proxy",
            [
                _program(cfg, layout, "MAC_NGINX_BIN", "/usr/sbin/nginx"),
                "-p",
                str(proxy_dir),
                "-c",
                str(proxy_conf),
                "-e",
                "stderr",
            ],
            port=cfg.master_port,
            liveness_path="/health",
            env=env,
            prestart=[tls_prestart, proxy_prestart],
            ready_timeout=90,
            host=proxy_host,
            bind=bind(cfg),
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
                # The container's host name is its own: Celery's %h says it.
                "-n",
                "mac-worker@%h" if docker else worker_name(),
            ],
            env=env,
            # Its own answer: a ping through the broker, without loading Django.
            health_command=(
                _in_container("worker", layout)
                if docker
                else [*_worker_ping(py, _broker(cfg)), worker_name()]
            ),
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
        project_spec(
            "prometheus",
            [
                _program(cfg, layout, "MAC_PROMETHEUS_BIN", "/usr/bin/prometheus"),
                f"--config.file={prom_config}",
                f"--web.listen-address={layout.listen}:{layout.prometheus_port}",
                f"--storage.tsdb.path={Path('/prometheus') if docker else prom_dir / 'data'}",
                f"--web.external-url={layout.public_url}/prometheus/",
                *PROMETHEUS_FLAGS,
            ],
            _host_port(cfg, layout, "prometheus"),
            env,
            prom_prestart,
        ),
    ]
    if own_alertmanager:
        specs.append(
            project_spec(
                "alertmanager",
                [
                    _program(
                        cfg, layout, "MAC_ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager"
                    ),
                    f"--config.file={layout.alertmanager_dir / 'alertmanager.yml'}",
                    f"--storage.path={Path('/alertmanager') if docker else data / 'alertmanager-data'}",  # noqa: E501
                    f"--web.listen-address={layout.listen}:{layout.alertmanager_port}",
                    f"--web.external-url={layout.public_url}/alertmanager/",
                    *ALERTMANAGER_FLAGS,
                ],
                _host_port(cfg, layout, "alertmanager"),
                env,
                alertmanager_prestart,
            )
        )
    if scaleout.shards(cfg):
        # Scale-out mode (MAC_SCRAPE_SHARDS, docs/scaling.md): scrapers, store and rules
        # replace mac-prometheus, and every process reads metrics from the store.
        if not docker:
            env.update(scaleout.env_overrides(cfg, layout))
            kept = "" if cfg.get("MAC_SD_TOKEN") else scaleout.kept_sd_token(data)
            if kept:
                env["MAC_SD_TOKEN"] = kept
        specs = [spec for spec in specs if spec.name != "prometheus"]
        specs += scaleout.specs(
            cfg, layout, env, views_port=_host_port(cfg, layout, "prometheus"),
            project_spec=project_spec,
        )  # fmt: skip
    if docker:
        specs.insert(0, _redis(layout))
    for spec in specs:
        spec.prestart_after = PRESTART_AFTER.get(spec.name, PRESTART_AFTER["*"])
    return specs


def _redis(layout: Layout) -> ServiceSpec:
    """The Compose master's own Redis: the broker and the Channels layer. Reached only on
    the master's own network (no published port), hence no protected mode."""
    argv = ["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
    return ServiceSpec("redis", argv, health_command=_in_container("redis", layout))


def container_check(service: str, layout: Layout) -> list[str] | None:
    """Under Compose, the service's own check, run inside its container: Docker runs it as
    the container's health check (compose.py), `mac status master` with `docker exec`
    where this host has no port to ask. The servers' own URLs, Redis's PING, and the
    worker's Celery ping of its own node name (its container's host name, Celery's %h)."""
    urls = {
        "api-server": f"{layout.api_port}/health",
        "proxy": f"{layout.http_port}/health",
        "prometheus": f"{layout.prometheus_port}/-/ready",
        "alertmanager": f"{layout.alertmanager_port}/-/ready",
    }
    if service in urls:
        return ["curl", "-fsS", "-o", "/dev/null", f"http://127.0.0.1:{urls[service]}"]
    if service == "redis":
        return ["redis-cli", "ping"]
    if service == "worker":
        ping = shlex.join(_worker_ping(layout.python, DOCKER_REDIS_URL))
        return ["sh", "-c", f'{ping} "mac-worker@$HOSTNAME"']
    return None


def _in_container(service: str, layout: Layout) -> list[str]:
    """How this host runs the service's container_check: `docker exec`."""
    return ["docker", "exec", f"mac-{service}", *(container_check(service, layout) or [])]


def _host_port(cfg: NodeConfig, layout: Layout, service: str) -> int:
    """Where this host reaches `service`: its own port, or the one its container
    publishes on the loopback (MAC_PROMETHEUS_PORT, MAC_ALERTMANAGER_PORT)."""
    return prometheus_port(cfg) if service == "prometheus" else alertmanager_port(cfg)


def _broker(cfg: NodeConfig) -> str:
    return (
        cfg.get("MAC_CELERY_BROKER_URL") or cfg.get("MAC_REDIS_URL") or "redis://127.0.0.1:6379/0"
    )


def _worker_ping(py: str, broker: str) -> list[str]:
    """Celery's ping through the broker, without loading Django; the worker's node name
    comes last."""
    return [py, "-m", "celery", "-b", broker, "inspect", "ping", "-t", "2", "-d"]
