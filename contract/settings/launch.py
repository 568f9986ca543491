"""The settings `mac start master` reads to launch the master's services: where they
listen, how many workers, which programs (the process runtime runs Debian's)."""

from __future__ import annotations

from contract.services import MASTER_ALERTMANAGER_PORT, MASTER_PROMETHEUS_PORT
from contract.settings.kinds import Address, HostName, Integer, Port, Text
from contract.settings.model import Applies, Derived, Group, Setting, Side

MASTER = Side.MASTER
PROCESS = Applies.PROCESS
# The API server's own port behind the proxy, which alone listens on MAC_MASTER_PORT.
API_INTERNAL_PORT = 28081


def _program(name: str, path: str, what: str) -> Setting:
    return Setting(name, Text(looks_like="program"), path, what, MASTER, applies=PROCESS)


def _engine_program(name: str, path: str, what: str) -> Setting:
    """A scale-out engine's program: under Docker the host's, mounted into its container
    (maccli.master.scaleout.host_programs), so a newer release runs without a new image."""
    return Setting(
        name, Text(looks_like="program"), path, what, MASTER,
        applies_note="Docker: the host's, mounted",
    )  # fmt: skip


LAUNCH = Group(
    "The master's processes (`mac start master`)",
    (
        Setting(
            "MAC_MASTER_BIND",
            Address(),
            "0.0.0.0",
            "the address the front door listens on",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_PUBLIC_HOST",
            HostName(),
            Derived("the host's address on its default route"),
            "the address agents use for the master: in its certificate and the join line",
            MASTER,
        ),
        Setting(
            "MAC_API_WORKERS",
            Integer(1, 64),
            2,
            "API server processes (gunicorn workers)",
            MASTER,
        ),
        Setting(
            "MAC_WORKER_CONCURRENCY",
            Integer(1, 256),
            2,
            "Celery worker processes",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_API_INTERNAL_PORT",
            Port(),
            API_INTERNAL_PORT,
            "the API server's loopback port behind the front door",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_PROMETHEUS_PORT",
            Port(),
            MASTER_PROMETHEUS_PORT,
            "Prometheus (or scale-out's merged targets view) on the master's loopback",
            MASTER,
        ),
        Setting(
            "MAC_ALERTMANAGER_PORT",
            Port(),
            MASTER_ALERTMANAGER_PORT,
            "MAC's Alertmanager on the master's loopback",
            MASTER,
        ),
        _program("MAC_NGINX_BIN", "/usr/sbin/nginx", "the front door's nginx"),
        _program("MAC_PROMETHEUS_BIN", "/usr/bin/prometheus", "Prometheus"),
        _program("MAC_ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager", "Alertmanager"),
        _engine_program(
            "MAC_VICTORIA_METRICS_BIN", "/usr/bin/victoria-metrics", "scale-out's store"
        ),
        _engine_program("MAC_VMAGENT_BIN", "/usr/bin/vmagent", "scale-out's scrapers"),
        _engine_program("MAC_VMALERT_BIN", "/usr/bin/vmalert", "scale-out's rule evaluator"),
        _engine_program("MAC_VMBACKUP_BIN", "/usr/bin/vmbackup", "`mac backup metrics`"),
        _engine_program("MAC_VMRESTORE_BIN", "/usr/bin/vmrestore", "`mac restore metrics`"),
    ),
)

GROUPS = (LAUNCH,)
