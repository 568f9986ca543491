"""docker/docker-compose.master.yml, written from the master's specs.

`mac start master` under Docker writes the master's Compose file from master_specs on
the Compose network (layout.docker_layout) with this master's settings, and Compose
runs that file; docker/docker-compose.master.yml is the same writer's output for the
default settings, committed so that people can read it (and `docker compose -p mac -f
docker/docker-compose.master.yml up -d` works without `mac`). Regenerate it with

    python -m maccli.master.compose --write

and tests/maccli/test_compose_files.py fails while it is stale.

From the specs: each service's command line and the commands that prepare it, run in
its container in order before it; its published port; its container's health check
(specs.container_check). Written here, as they have no process equivalent: the images,
volumes and networks, the waits that order the containers (the process runtime starts
them one after another), and the environment: every setting the master's services may
read passes through by name (its value from `mac`'s environment and env files at `up`;
secrets are never written into the file), and the folders and addresses of the Compose
network are pinned. The secrets go only to the containers that read them
(SECRET_READERS), so that `docker inspect` of the others shows none.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import yaml

from contract.atomicfile import write_atomically
from contract.settings import CATALOG, SECRETS, Applies, SetWith, Side
from maccli.master.layout import (
    DATA_VOLUME,
    DOCKER_ALERTMANAGER,
    DOCKER_DATA,
    DOCKER_REDIS_URL,
    DOCKER_TARGETS,
    DOCKER_TLS,
    docker_layout,
)
from maccli.master.preflight import REPO_ROOT, tls_port
from maccli.master.slurmaccess import SlurmAccess, slurm_access
from maccli.master.specs import container_check, master_specs
from maccli.output import CliError
from maccli.runtimes import ServiceSpec
from node.config import NodeConfig

NAME = "docker-compose.master.yml"
COMMITTED = REPO_ROOT / "docker" / NAME
IMAGE = "${MAC_IMAGE:-mac:latest}"
HEALTHCHECK_INTERVAL = "${MAC_HEALTHCHECK_INTERVAL:-30s}"
# What Compose itself substitutes in the file (every other `$` is written `$$`).
COMPOSE_REFERENCES = (
    IMAGE,
    HEALTHCHECK_INTERVAL,
    "${MAC_PUBLIC_URL:-http://localhost:28080}",
    "${MAC_TLS_HOST_NAMES:-}",
)
HEADER = """\
# The MAC master under Docker Compose, WRITTEN from the master's specs by
# maccli/master/compose.py: edit the specs, then run
#   python -m maccli.master.compose --write
# `mac start master` writes this master's own copy into its data folder (MAC_DATA_DIR)
# with its settings; this one has the defaults:
#   docker compose -p mac -f docker/docker-compose.master.yml up -d
# Every container runs MAC's one image (Debian's packages, built offline), and each
# runs the commands that prepare it before its server, as the process runtime does.
# Only mac-proxy is published to other hosts; mac-prometheus and mac-alertmanager on
# the master's 127.0.0.1 only (docs/security.md). Where this host has a slurm.conf,
# mac-worker also mounts it and munge's socket (maccli/master/slurmaccess.py).
# Every container has the settings below (&master-environment); the secrets go only to
# those that read them (after `<<:`, each its own), so `docker inspect` of the others
# shows none.
"""
# Pinned in the containers: the Compose network's folders and addresses.
PINNED = {
    "DJANGO_SETTINGS_MODULE": "macweb.settings",
    "MAC_DATA_DIR": str(DOCKER_DATA),
    "MAC_SD_DIR": str(DOCKER_TARGETS),
    "MAC_TLS_DIR": str(DOCKER_TLS),
    "MAC_REDIS_URL": DOCKER_REDIS_URL,
    "MAC_PROMETHEUS_URL": "http://prometheus:29090",
    "MAC_ALERTMANAGER_DIR": str(DOCKER_ALERTMANAGER),
    # The API server believes the client address mac-proxy sends (X-Forwarded-For).
    "FORWARDED_ALLOW_IPS": "*",
}
# Written from this master's own settings at each start (a site's Alertmanager).
FROM_SETTINGS = ("MAC_ALERTMANAGER_URL", "MAC_ALERTMANAGER_MANAGED")
# Set by `mac` at each start from this host (the containers cannot see its names and
# addresses): the certificate's names, the allowed hosts, the links' front door.
FROM_MAC = ("MAC_TLS_HOST_NAMES", "MAC_HOST_ADDRESSES", "MAC_PUBLIC_URL")
# The volumes each service mounts.
DATA_VOLUMES = [
    f"{DATA_VOLUME}:{DOCKER_DATA}",
    f"mac-targets:{DOCKER_TARGETS}",
    # alertmanager.yml and mac.tmpl, written by the api-server and beat's worker.
    f"mac-alertmanager-config:{DOCKER_ALERTMANAGER}",
]
VOLUMES = {
    "api-server": DATA_VOLUMES,
    "worker": DATA_VOLUMES,
    "beat": DATA_VOLUMES,
    "proxy": [f"mac-tls:{DOCKER_TLS}", f"{DATA_VOLUME}:{DOCKER_DATA}"],
    "prometheus": [
        f"{DATA_VOLUME}:{DOCKER_DATA}",
        f"mac-targets:{DOCKER_TARGETS}",
        f"mac-tls:{DOCKER_TLS}:ro",
        "mac-prometheus:/prometheus",
    ],
    "alertmanager": [
        f"mac-alertmanager-config:{DOCKER_ALERTMANAGER}:ro",
        "mac-alertmanager:/alertmanager",
    ],
}
# What each container waits for, where the process runtime starts one after another:
# the api-server's prepare_master makes the secret key and the installation id (last);
# the proxy's prepare_tls the CA; the api-server writes alertmanager.yml.
WAITS = {
    "worker": [DOCKER_DATA / "installation_id"],
    "beat": [DOCKER_DATA / "installation_id"],
    # Its configuration's writer reads the settings, the metrics token among them.
    "prometheus": [DOCKER_DATA / "installation_id", DOCKER_TLS / "ca.pem"],
    "alertmanager": [DOCKER_ALERTMANAGER / "alertmanager.yml"],
}
DEPENDS_ON = {
    "api-server": ["redis"],
    "worker": ["redis"],
    "beat": ["redis"],
    "proxy": ["api-server"],
}
# How long a container's health check may take: the worker's loads Celery first.
HEALTHCHECK_TIMEOUT = {"worker": "10s"}
# Who reads each secret (contract.settings.SECRETS that reach the containers, and
# DATABASE_URL, which may hold the database's password); no other container gets it.
SECRET_READERS = {
    "DATABASE_URL": ("api-server", "worker"),  # the inventory (beat only sends tasks)
    "MAC_ADMIN_PASSWORD": ("api-server",),  # createadmin, a step of its start
    "MAC_JOIN_TOKEN": ("api-server",),  # POST /api/v1/register
    "MAC_METRICS_TOKEN": ("api-server", "prometheus"),  # /metrics; prometheus_config sends it
    "MAC_SD_TOKEN": ("api-server",),  # http_sd
    # The channel alert_channels_from_env makes, and the password-reset mail.
    "MAC_SMTP_PASSWORD": ("api-server",),
}


def passed_through() -> list[str]:
    """The settings the master's containers take from `mac` by name: each declared for
    the master that works under Docker and can be set with `mac env set` (or is set by
    mac), but those the Compose network pins."""
    names = {
        name
        for name, item in CATALOG.items()
        if item.side in (Side.MASTER, Side.BOTH)
        and item.applies is not Applies.PROCESS
        and item.set_with is not SetWith.ENVIRONMENT
    }
    return sorted((names | {"DATABASE_URL", *FROM_MAC}) - set(PINNED))


def secrets() -> list[str]:
    """The passed-through settings that only their readers get (SECRET_READERS)."""
    return [name for name in passed_through() if name in SECRETS or name == "DATABASE_URL"]


def _environment(cfg: NodeConfig, slurm: SlurmAccess | None) -> dict[str, str | None]:
    """What every container gets: the pinned values and the settings but the secrets."""
    site_alertmanager = cfg.get("MAC_ALERTMANAGER_URL")
    pinned = {
        **PINNED,
        "MAC_ALERTMANAGER_URL": docker_layout(cfg).alertmanager_url,
        "MAC_ALERTMANAGER_MANAGED": cfg.get("MAC_ALERTMANAGER_MANAGED")
        or ("0" if site_alertmanager else "1"),
    }
    hidden = set(secrets())
    passed = {name: None for name in passed_through() if name not in pinned.keys() | hidden}
    return {**pinned, **passed, **(slurm.environment if slurm else {})}


def _secrets_of(service: str) -> dict[str, None]:
    """The secrets `service` reads, passed through by name."""
    return {name: None for name in secrets() if service in SECRET_READERS.get(name, ())}


def _healthcheck(spec: ServiceSpec, cfg: NodeConfig) -> dict | None:
    check = container_check(spec.name, docker_layout(cfg))
    if check is None:
        return None
    return {
        "test": ["CMD", *(_escaped(word) for word in check)],
        "interval": HEALTHCHECK_INTERVAL,
        "timeout": HEALTHCHECK_TIMEOUT.get(spec.name, "5s"),
        "retries": 3,
    }


def _script(spec: ServiceSpec) -> str:
    """The container's command: its waits, its preparing commands, then its server."""
    steps = [f"until [ -s {path} ]; do sleep 1; done" for path in WAITS.get(spec.name, [])]
    steps += [shlex.join(step) for step in spec.prestart]
    steps.append(f"exec {shlex.join(spec.argv)}")
    return " &&\n".join(steps)


def _service(spec: ServiceSpec, environment: dict, cfg: NodeConfig) -> dict:
    service: dict = {
        "image": IMAGE,
        "container_name": f"mac-{spec.name}",
        "restart": "unless-stopped",
        "networks": ["master"],
        "entrypoint": [],
    }
    if spec.name in DEPENDS_ON:
        service["depends_on"] = DEPENDS_ON[spec.name]
    if spec.name in VOLUMES:
        service["command"] = ["sh", "-c", _escaped(_script(spec))]
        service["environment"] = {**environment, **_secrets_of(spec.name)}
    else:
        # mac-redis: no settings, no files, nothing to do before its server.
        service["command"] = spec.argv
    ports = _ports(spec, cfg)
    if ports:
        service["ports"] = ports
    if spec.name in VOLUMES:
        service["volumes"] = VOLUMES[spec.name]
    healthcheck = _healthcheck(spec, cfg)
    if healthcheck:
        service["healthcheck"] = healthcheck
    return service


def _ports(spec: ServiceSpec, cfg: NodeConfig) -> list[str]:
    """The published ports: the front door's to every host, the servers' on the
    master's loopback only; the API server none (only mac-proxy reaches it)."""
    layout = docker_layout(cfg)
    if spec.name == "proxy":
        return [f"{spec.port}:{layout.http_port}", f"{tls_port(cfg)}:{layout.https_port}"]
    inside = {"prometheus": layout.prometheus_port, "alertmanager": layout.alertmanager_port}
    if spec.name in inside:
        return [f"127.0.0.1:{spec.port}:{inside[spec.name]}"]
    return []


def document(cfg: NodeConfig, slurm: SlurmAccess | None = None) -> dict:
    """The Compose document of the master's services with `cfg`'s settings (scale-out
    mode's engines come in a file of their own, scaleout.compose_overlay); with `slurm`,
    mac-worker runs Slurm's tools against the host's cluster (the drain, job reads)."""
    specs = master_specs(cfg, docker_layout(cfg))
    environment = _environment(cfg, slurm)
    services = {}
    for spec in specs:
        if spec.name in VOLUMES or spec.name == "redis":
            services[spec.name] = _service(spec, environment, cfg)
    if slurm and "worker" in services:
        worker = services["worker"]
        worker["volumes"] = [*worker["volumes"], *slurm.volumes]
        # Slurm lets root change nodes: under an engine's user-namespace remap the
        # worker's root is an unprivileged host user, whom slurmctld refuses and who
        # cannot open munge's socket. No remap: this changes nothing.
        worker["userns_mode"] = "host"
        if slurm.hosts:
            worker["extra_hosts"] = list(slurm.hosts)
    # The named volumes (a bind mount's source is a path).
    volumes = sorted(
        {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
        - {v.split(":")[0] for v in (slurm.volumes if slurm else [])}
    )
    return {
        "services": services,
        "networks": {"master": {"driver": "bridge"}},
        "volumes": {volume: {} for volume in volumes},
    }


def _escaped(text: str) -> str:
    """Compose substitutes `$`: a literal one is `$$`, but for COMPOSE_REFERENCES."""
    escaped = text.replace("$", "$$")
    for reference in COMPOSE_REFERENCES:
        escaped = escaped.replace(reference.replace("$", "$$"), reference)
    return escaped


class _Dumper(yaml.SafeDumper):
    """Block style; the environment every service shares, written once under a name
    people can read, and referred to by it (a service's own secrets after a merge key)."""

    shared: object = None

    def ignore_aliases(self, data) -> bool:
        return data is not self.shared

    def generate_anchor(self, node) -> str:
        return "master-environment"


def _literal(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _passed(dumper: yaml.SafeDumper, value: None):
    """A name without a value: Compose passes it through from its environment."""
    return dumper.represent_scalar("tag:yaml.org,2002:null", "")


class _Merge:
    """YAML's merge key, `<<`: the shared environment, then a service's own entries."""


def _merge(dumper: yaml.SafeDumper, value: _Merge):
    return dumper.represent_scalar("tag:yaml.org,2002:merge", "<<")


_Dumper.add_representer(str, _literal)
_Dumper.add_representer(type(None), _passed)
_Dumper.add_representer(_Merge, _merge)
MERGE = _Merge()


def _over(shared: dict, environment: dict) -> dict:
    """`environment` written as the shared one and what it adds."""
    own = {name: value for name, value in environment.items() if name not in shared}
    return {MERGE: shared, **own} if own else shared


def render(cfg: NodeConfig, slurm: SlurmAccess | None = None) -> str:
    written = document(cfg, slurm)
    shared = _environment(cfg, slurm)
    for service in written["services"].values():
        if "environment" in service:
            service["environment"] = _over(shared, service["environment"])
    dumper = type("Dumper", (_Dumper,), {"shared": shared})
    body = yaml.dump(written, Dumper=dumper, sort_keys=False, default_flow_style=False, width=100)
    return HEADER + body


def default_config() -> NodeConfig:
    """The defaults alone: no environment and no env files (the committed file)."""
    return NodeConfig(
        environ={}, node_values={}, user_values={}, node_file=Path("/nonexistent/node/env"),
        user_file=Path("/nonexistent/user/env"),
    )  # fmt: skip


def write(cfg: NodeConfig, folder: Path, *, slurm: bool = True) -> Path:
    """This master's Compose file in `folder` (its data folder), with this host's Slurm
    unless `slurm` is False (a stop, which a slurm.conf changed since must not block)."""
    path = folder / NAME
    text = render(cfg, slurm_access(cfg) if slurm else None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text.encode())
    except OSError as exc:
        raise CliError(
            f"cannot write {path}: {exc}",
            hint="MAC_DATA_DIR must be writable by whoever runs mac:",
            commands=[f"ls -ld {folder}"],
        ) from None
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {COMMITTED}")
    args = ap.parse_args(argv)
    text = render(default_config())
    if args.write:
        COMMITTED.write_text(text)
        print(f"Wrote {COMMITTED}.")
        return 0
    if COMMITTED.read_text() != text:
        print(f"{COMMITTED} is stale: python -m maccli.master.compose --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
