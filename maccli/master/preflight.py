"""The master's settings as `mac` reads them before anything starts: its ports, folders
and names, MAC_HTTP and the drain's settings checked (a clear error, not a traceback in
a service's log), and Redis asked whether it answers.

Every value here is the same under both runtimes: the services' specs (specs.py) and
the lines `mac start master` prints are made from them.
"""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from urllib.parse import urlsplit

from contract import drainpolicy
from contract.services import (
    MASTER_ALERTMANAGER_PORT,
    MASTER_API_PORT,
    MASTER_PROMETHEUS_PORT,
    MASTER_TLS_PORT,
)
from maccli.output import CliError
from node.config import NODE_KEY, ConfigError, NodeConfig, Source

ROLE = "master"
REPO_ROOT = Path(__file__).resolve().parents[2]
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
WILDCARDS = {"0.0.0.0", "::"}


def data_dir(cfg: NodeConfig) -> Path:
    # The same default as macweb.settings.DATA_DIR (./var of the checkout).
    return Path(cfg.get("MAC_DATA_DIR") or REPO_ROOT / "var").expanduser().resolve()


def has_command(module: str) -> bool:
    """Whether this checkout has the Django command `module` (a master's, not an agent's)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def prometheus_port(cfg: NodeConfig) -> int:
    return cfg.int_value("MAC_PROMETHEUS_PORT", MASTER_PROMETHEUS_PORT)


def alertmanager_port(cfg: NodeConfig) -> int:
    return cfg.int_value("MAC_ALERTMANAGER_PORT", MASTER_ALERTMANAGER_PORT)


def tls_port(cfg: NodeConfig) -> int:
    """HTTPS of the proxy, beside HTTP on MAC_MASTER_PORT."""
    return cfg.int_value("MAC_TLS_PORT", MASTER_TLS_PORT)


def api_internal_port(cfg: NodeConfig) -> int:
    """Where the API server listens behind the proxy (127.0.0.1 only)."""
    return cfg.int_value("MAC_API_INTERNAL_PORT", API_INTERNAL_PORT)


def tls_dir(cfg: NodeConfig) -> Path:
    """The same default as macweb.settings.TLS_DIR."""
    return Path(cfg.get("MAC_TLS_DIR") or data_dir(cfg) / "tls").expanduser().resolve()


def bind(cfg: NodeConfig) -> str:
    """The address the front door listens on (MAC_MASTER_BIND)."""
    return cfg.get("MAC_MASTER_BIND") or "0.0.0.0"


def probe_host(cfg: NodeConfig) -> str:
    """Where this host reaches the front door."""
    address = bind(cfg)
    return "127.0.0.1" if address in WILDCARDS else address


def tls_names(cfg: NodeConfig) -> list[str]:
    """What agents may call the master, for its server certificate (with MAC_TLS_NAMES and
    loopback, which prepare_tls adds)."""
    names = [public_host(cfg), socket.gethostname(), socket.getfqdn()]
    if bind(cfg) not in WILDCARDS:
        names.append(bind(cfg))
    return list(dict.fromkeys(name for name in names if name))


def http_mode(cfg: NodeConfig) -> str:
    """MAC_HTTP, checked before anything starts (macweb.settings reads it too)."""
    mode = (cfg.get("MAC_HTTP") or "on").strip().lower()
    if mode not in {"on", "off", "redirect"}:
        raise ConfigError(f"MAC_HTTP={mode!r}: use on, off or redirect (docs/tls.md).")
    return mode


def check_drain_settings(cfg: NodeConfig) -> None:
    """The drain's settings (contract.drainpolicy), checked before anything starts, as
    macweb.settings would refuse them: a clear error, not a traceback in a service log."""
    try:
        drainpolicy.check_settings(cfg.get)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


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


def _host_address() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent
            return sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def public_host(cfg: NodeConfig) -> str:
    """The master's address as agents and people reach it."""
    address = bind(cfg)
    return cfg.get("MAC_PUBLIC_HOST") or (_host_address() if address in WILDCARDS else address)


def public_url(cfg: NodeConfig) -> str:
    """The front door as people reach it (MAC_PUBLIC_URL, else derived from the master's
    address and port): the links in notifications and the servers' external URLs.
    The same under both runtimes."""
    given = (cfg.get("MAC_PUBLIC_URL") or "").rstrip("/")
    if given:
        return given
    # Links go to HTTPS (the master's CA signs it): over plain HTTP the pages answer other
    # hosts only with a redirect there, and a password-reset link must never cross HTTP.
    http_mode(cfg)  # a bad MAC_HTTP stops here, before anything starts
    return f"https://{public_host(cfg)}:{tls_port(cfg)}"


def health_url(cfg: NodeConfig) -> str:
    """The guide's health check: plain HTTP, which /health keeps in every mode but off."""
    if http_mode(cfg) == "off":
        return f"{public_url(cfg)}/health"
    return f"http://{public_host(cfg)}:{cfg.master_port}/health"


def redis_answers(url: str) -> tuple[bool, str]:
    """Whether Redis answers a PING at `url`, and where that was (with why not)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
    except OSError as exc:
        return False, f"{host}:{port}: {exc.strerror or exc}"
    return answer.startswith((b"+PONG", b"-NOAUTH")), f"{host}:{port}"


def require_redis(cfg: NodeConfig) -> None:
    """The host's Redis, which the process runtime's worker and live dashboard need."""
    ok, where = redis_answers(cfg.get("MAC_REDIS_URL") or "redis://127.0.0.1:6379/0")
    if not ok:
        raise CliError(
            f"Redis does not answer at {where} (MAC_REDIS_URL): the worker and the live "
            "dashboard need it.",
            hint="Start Redis (scripts/bootstrap does it), then run again:",
            commands=["sudo systemctl start redis-server", "mac start master"],
        )
