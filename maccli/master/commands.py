"""`mac start|stop|restart|status master`: the master's services under the runtime that
runs them here, and what `mac start master` prints (where to go, how agents join).

These commands run on the master, but they still start Django only in child
processes: `mac` itself never loads the settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.redact import url_without_credentials
from maccli import output
from maccli.master import compose, scaleout
from maccli.master.access import admin_said, create_admin, join_lines
from maccli.master.layout import Layout, master_layout
from maccli.master.preflight import (
    ROLE,
    data_dir,
    health_url,
    prometheus_port,
    public_host,
    public_url,
    require_redis,
    tls_names,
)
from maccli.master.specs import master_specs
from maccli.output import CliError, print_states
from maccli.runtimes import Runtime, ServiceSpec, ServiceState, choose_runtime
from maccli.runtimes.base import service_health
from node.config import NodeConfig
from node.host import host_addresses


def _prepared(
    cfg: NodeConfig, runtime: Runtime, *, starting: bool = True
) -> tuple[Layout, list[ServiceSpec]]:
    """Where the master's services run under this runtime, and their specs; what the
    runtime's own service definitions take from `mac` is handed to it (the Compose
    files written from the specs; this host's names, addresses and the derived public
    URL, which the containers cannot see). A stop checks none of the host's files the
    containers would mount (slurm.conf, MAC_*_BIN): it must stop whatever they hold."""
    layout = master_layout(cfg, own_network=runtime.own_network)
    specs = master_specs(cfg, layout)
    # The proxy's certificate and the API's allowed hosts (macweb.hosts), and the links.
    runtime.pass_values(
        {
            "MAC_TLS_HOST_NAMES": ",".join(tls_names(cfg)),
            "MAC_HOST_ADDRESSES": ",".join(host_addresses()),
            "MAC_PUBLIC_URL": public_url(cfg),
        }
    )
    wanted = {spec.name for spec in specs}
    # The engines of another setting (fewer scrapers, or none) go, and MAC's
    # Alertmanager where the site's replaces it.
    runtime.prune(
        lambda service: (
            (scaleout.is_engine(service) or service == "alertmanager") and service not in wanted
        )
    )
    if layout.docker:
        written = compose.write(cfg, data_dir(cfg), slurm=starting)
        overlay = _scaleout_overlay(cfg, runtime, layout, specs, starting)
        runtime.use_files([written, *overlay])
    return layout, specs


def _scaleout_overlay(
    cfg: NodeConfig, runtime: Runtime, layout: Layout, specs: list[ServiceSpec], starting: bool
) -> list[Path]:
    """On the Compose network, scale-out mode is one more Compose file, written from the
    engines' specs."""
    if not scaleout.shards(cfg):
        return []
    data = data_dir(cfg)
    engines = [s for s in specs if scaleout.is_engine(s.name) or s.name == "prometheus"]
    programs = scaleout.host_programs(cfg) if starting else []
    overlay = scaleout.compose_overlay(engines, scaleout.env_overrides(cfg, layout), programs)
    path = scaleout.write_overlay(data, overlay)
    # The store's keys (and an earlier release's http_sd token) reach the containers
    # through Compose's environment, never the file.
    kept = "" if cfg.get("MAC_SD_TOKEN") else scaleout.kept_sd_token(data)
    if kept:
        runtime.pass_values({"MAC_SD_TOKEN": kept})
    if not cfg.get("MAC_METRICS_STORE_URL"):
        runtime.pass_values(scaleout.store_keys(scaleout.folder(data)))
    return [path]


def where_lines(cfg: NodeConfig, layout: Layout) -> list[str]:
    """Where the started master's pages, health and engines are. A site's own engines
    are named without the credentials their URLs may carry: this goes to terminals and
    logs."""
    api = public_url(cfg)
    own_alertmanager = (
        f"(channels: {api}/admin/alerting/; Alertmanager for amtool and Grafana: "
        f"{api}/alertmanager/)"
    )
    site_alertmanager = cfg.get("MAC_ALERTMANAGER_URL")
    lines = [
        f"Dashboard:   {api}/",
        f"API docs:    {api}/api/v1/docs/",
        f"Health:      curl {health_url(cfg)}",
        f"Prometheus:  {api}/prometheus/targets (log in first; on this host also "
        f"curl http://127.0.0.1:{prometheus_port(cfg)}/api/v1/targets)",
        f"Alerts:      {api}/alerts/ "
        + (
            f"(the site's Alertmanager: {url_without_credentials(site_alertmanager)})"
            if site_alertmanager
            else own_alertmanager
        ),
    ]
    if scaleout.shards(cfg):
        # Scale-out mode: where the metrics are, and who scrapes them.
        lines.append(
            f"Metrics:     store {url_without_credentials(scaleout.store_url(cfg))}, "
            f"{scaleout.shards(cfg)} scrapers "
            "(mac status master), merged targets on the Prometheus URL"
        )
        if layout.docker:
            overlay = scaleout.folder(data_dir(cfg)) / scaleout.OVERLAY_NAME
            lines.append(f"             Compose file: {overlay}")
    return lines


def start(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name, remove_stale=remove_stale)
    layout, specs = _prepared(cfg, runtime)
    if not layout.docker:
        require_redis(cfg)  # the host's; the Compose master runs its own
    states = runtime.start(ROLE, specs)
    # The admin user: made here on this host, by the api-server's container under Compose,
    # which keeps what it said for this command alone (never in its log).
    admin = admin_said(runtime, layout) if layout.docker else create_admin(specs)
    print_states(states, f"Master services ({runtime.name} runtime)")
    lines = where_lines(cfg, layout)
    if admin:
        lines.append(f"Admin:       {admin}")
    lines += join_lines(cfg, runtime, layout, public_host(cfg))
    for line in lines:
        output.say(line)
    output.ok("Master started.")
    return 0


def stop(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name)
    _, specs = _prepared(cfg, runtime, starting=False)
    states = runtime.stop(ROLE, specs)
    still = [s.name for s in states if s.running]
    if still:
        raise CliError(f"still running: {', '.join(still)}", commands=["mac status master"])
    output.ok(f"Stopped the master ({runtime.name} runtime).")
    return 0


def restart(runtime_name: str | None = None, remove_stale: bool = False) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name, remove_stale=remove_stale)
    layout, specs = _prepared(cfg, runtime)
    states = runtime.restart(ROLE, specs)
    print_states(states, f"Master services ({runtime.name} runtime)")
    # A recreated api-server container runs createadmin again: a first one makes the user.
    admin = admin_said(runtime, layout) if layout.docker else ""
    if admin:
        output.say(f"Admin:       {admin}")
    return 0


def status(runtime_name: str | None = None) -> int:
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, ROLE, runtime_name)
    layout = master_layout(cfg, own_network=runtime.own_network)
    specs = master_specs(cfg, layout)
    states = _answered(runtime.status(ROLE, specs), specs)
    print_states(states, f"Master services ({runtime.name} runtime)")
    if scaleout.shards(cfg):
        # Each scraper's share, from its own targets (MAC_SCRAPE_SHARDS).
        output.say("Scrapers (share of the fleet, from each scraper's /api/v1/targets):")
        for name, share in scaleout.scraper_shares(cfg):
            output.say(f"  {name}: {share}")
    healthy = all(s.running and s.health in ("ok", "-") for s in states)
    return 0 if healthy else 1


def _answered(states: list[ServiceState], specs: Sequence[ServiceSpec]) -> list[ServiceState]:
    """Each running service's own answer where the runtime's status has none: its health
    command (under Compose, its container's check through `docker exec`: the API server,
    the worker's Celery ping, mac-redis). A wedged worker is then no longer healthy."""
    commands = {spec.name: spec for spec in specs if spec.health_command}
    asked = [s for s in states if s.running and s.health == "-" and s.name in commands]
    if asked:
        with ThreadPoolExecutor(max_workers=len(asked)) as pool:
            words = pool.map(lambda state: service_health(commands[state.name]), asked)
            for state, word in zip(asked, words, strict=True):
                state.health = word
    return states
