"""The agent's layered configuration: what `mac env` writes and every agent command reads.

Precedence, highest first: the process environment, the per-node file
(/etc/mango/mac/env), the per-user file (~/.mac/env), then built-in defaults. On
clusters whose home directories live on a network filesystem every node reads the
same ~/.mac/env, so values that differ per node (NODE_NAME above all) belong in the
per-node file; this module knows how to tell such a home apart.

Every path has an override variable (MAC_NODE_ENV_FILE, MAC_USER_ENV_FILE,
MAC_STATE_DIR, MAC_PROC_ROOT, MAC_SHARED_HOME) so tests work in a temporary directory.
What each setting is (its kind, default and limits) is declared once in
contract.settings; `NodeConfig.value` reads a setting's typed value through it.
No Django here: this runs on agents.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from contract import settings
from contract.pinning import parse_pin
from contract.settings.agent import service_port_name
from node.envfile import EnvFileError, read_env_file
from node.host import Roots

log = logging.getLogger(__name__)

DEFAULT_NODE_ENV_FILE = str(settings.setting("MAC_NODE_ENV_FILE").default)
DEFAULT_USER_ENV_FILE = settings.setting("MAC_USER_ENV_FILE").default_text()
DEFAULT_STATE_DIR_ROOT = "/var/lib/mac"
DEFAULT_STATE_DIR_USER = "~/.mac/state"

# Filesystem types whose content every node of a cluster may see at once.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "fuse.sshfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "fuse.ceph",
        "glusterfs",
        "fuse.glusterfs",
        "9p",
        "afs",
        "ocfs2",
        "gfs2",
        "fuse.s3fs",
        "fuse.juicefs",
        "wekafs",
    }
)

# The settings that move every file the node's configuration reads or writes (the per-node
# and per-user env files, the state folder): tests point each at a folder of their own.
FILE_SETTINGS = ("MAC_NODE_ENV_FILE", "MAC_USER_ENV_FILE", "MAC_STATE_DIR")

NODE_KEY = "MAC_NODE_KEY"
# Values that differ from node to node: never in a shared home, where every node would
# claim one name, one address or one node key. MAC_BIND only when it names an address
# (is_per_node); MASTER_IP alone may be shared on purpose (one master for every node).
PER_NODE_KEYS = frozenset({"NODE_NAME", "MASTER_IP", "MAC_AGENT_IP", NODE_KEY, "MAC_BIND"})
# The master's URL (https://<master>:28443 with a CA pin), in place of MASTER_IP.
MASTER_URL_KEY = "MASTER_URL"
CA_PIN_KEY = "MAC_MASTER_CA_SHA256"
# Values nobody but root should read: shown masked by `mac env list` (the declared secrets).
SECRET_KEYS = settings.SECRETS


def is_per_node(key: str, value: str) -> bool:
    """Whether KEY=VALUE differs from node to node. MAC_BIND=0.0.0.0 (any address) or a
    loopback one means the same on every node; MAC_BIND=10.0.0.17 is one node's address."""
    if key != "MAC_BIND":
        return key in PER_NODE_KEYS
    if value.strip().lower() == "localhost":
        return False
    try:
        address = ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        return True  # a host name: one node's
    return not (address.is_unspecified or address.is_loopback)


# The defaults `mac env list` shows beside what the files set.
DEFAULTS: dict[str, str] = {
    name: settings.setting(name).default_text()
    for name in ("MAC_MASTER_PORT", "MAC_RUNTIME", "MAC_BIND", "MAC_PORT_OFFSET")
}


class Source(StrEnum):
    PROCESS = "environment"
    NODE = "per-node file"
    USER = "per-user file"
    DEFAULT = "default"


class ConfigError(settings.SettingError):
    """A key or value that cannot be stored or used; the message names it and says why,
    ``commands`` (when given) what to run to fix it."""

    def __init__(self, message: str, commands: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.commands = list(commands)


# --- network filesystem detection ------------------------------------------------------


def _unescape_mount(field_: str) -> str:
    # /proc/mounts escapes spaces, tabs, newlines and backslashes as octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def filesystem_of(path: Path, roots: Roots | None = None) -> tuple[str, str] | None:
    """(mount point, filesystem type) of the mount holding path, from /proc/mounts."""
    try:
        text = (roots or Roots()).proc("mounts").read_text()
    except OSError:
        return None
    target = str(path)
    best: tuple[str, str] | None = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mount_point, fstype = _unescape_mount(parts[1]), parts[2]
        prefix = mount_point.rstrip("/") + "/"
        inside = target == mount_point or target.startswith(prefix) or mount_point == "/"
        # The last matching entry of equal length wins: later mounts hide earlier ones.
        if inside and (best is None or len(mount_point) >= len(best[0])):
            best = (mount_point, fstype)
    return best


# --- the configuration ------------------------------------------------------------------


@dataclass
class NodeConfig:
    """The merged configuration and where each value came from."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    node_values: dict[str, str] = field(default_factory=dict)
    user_values: dict[str, str] = field(default_factory=dict)
    node_file: Path = Path(DEFAULT_NODE_ENV_FILE)
    user_file: Path = Path(DEFAULT_USER_ENV_FILE)
    # Set when the per-node file exists but this user cannot read it (not root).
    node_file_unreadable: bool = False

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        complain: Callable[[str], None] | None = None,
    ) -> NodeConfig:
        """The configuration; an env file that cannot be read (not UTF-8, a directory) is a
        ConfigError saying what to do, or with ``complain`` (a service that keeps serving)
        told to it and left out."""
        environ = dict(os.environ if environ is None else environ)
        # Where the files are comes from the process environment alone.
        from_environment = settings.values(environ.get)
        try:
            node_file = from_environment["MAC_NODE_ENV_FILE"]
            user_file = from_environment["MAC_USER_ENV_FILE"]
        except settings.SettingError as exc:
            raise ConfigError(str(exc)) from None

        def read(path: Path) -> dict[str, str]:
            try:
                return read_env_file(path)
            except EnvFileError as exc:
                if complain is None:
                    raise ConfigError(str(exc), exc.commands) from None
                complain(f"{exc} {' && '.join(exc.commands)}; its settings are left out.")
                return {}

        unreadable = False
        try:
            node_values = read(node_file)
        except PermissionError:
            node_values, unreadable = {}, True
        try:
            user_values = read(user_file)
        except PermissionError:
            user_values = {}
        return cls(
            environ=environ,
            node_values=node_values,
            user_values=user_values,
            node_file=node_file,
            user_file=user_file,
            node_file_unreadable=unreadable,
        )

    # Lookups ---------------------------------------------------------------------------
    def lookup(self, key: str) -> tuple[str | None, Source | None]:
        """(value, source) by precedence; (None, None) when nothing sets it."""
        for values, source in (
            (self.environ, Source.PROCESS),
            (self.node_values, Source.NODE),
            (self.user_values, Source.USER),
            (DEFAULTS, Source.DEFAULT),
        ):
            if key in values:
                return values[key], source
        return None, None

    def get(self, key: str, default: str | None = None) -> str | None:
        value, _ = self.lookup(key)
        return default if value is None else value

    def source_of(self, key: str) -> Source | None:
        return self.lookup(key)[1]

    def merged(self) -> dict[str, tuple[str, Source]]:
        """Every MAC-related key with its winning value and source (for `mac env list`)."""
        keys = set(DEFAULTS) | set(self.user_values) | set(self.node_values)
        keys |= {
            k
            for k in self.environ
            if k.startswith("MAC_") or k in PER_NODE_KEYS or k == MASTER_URL_KEY
        }
        result: dict[str, tuple[str, Source]] = {}
        for key in sorted(keys):
            value, source = self.lookup(key)
            if value is not None and source is not None:
                result[key] = (value, source)
        return result

    def value(self, name: str) -> Any:
        """The typed value of the declared setting `name` (contract.settings) as the
        precedence gives it, else its default; ConfigError naming it when it is bad."""
        try:
            return settings.values(self.get)[name]
        except settings.SettingError as exc:
            raise ConfigError(str(exc)) from None

    def value_or_default(self, name: str, complain: Callable[[str], None]) -> Any:
        """`value`, but a bad one is told to `complain` and the declared default used: for
        a service that keeps serving whatever its settings say."""
        try:
            return self.value(name)
        except ConfigError as exc:
            default = settings.values(lambda _name: None)[name]
            complain(f"{exc} Using {settings.setting(name).default_text()} instead.")
            return default

    def int_value(self, key: str, default: int) -> int:
        """A declared whole-number setting; `default` where its default is left to the
        caller."""
        value = self.value(key)
        return default if value is None else value

    def roots(self) -> Roots:
        """Where `mac` reads this host: the MAC_*_ROOT settings (tests, containers)."""
        read = self.value
        return Roots(
            sys_root=str(read("MAC_SYS_ROOT")),
            proc_root=str(read("MAC_PROC_ROOT")),
            dev_root=str(read("MAC_DEV_ROOT")),
            etc_root=str(read("MAC_ETC_ROOT")),
            run_root=str(read("MAC_RUN_ROOT")),
            usr_root=str(read("MAC_USR_ROOT")),
            lib_root=str(read("MAC_LIB_ROOT")),
        )

    # Typed accessors -------------------------------------------------------------------
    @property
    def master_ip(self) -> str:
        """MASTER_IP, else the host of MASTER_URL."""
        explicit = (self.get("MASTER_IP") or "").strip()
        if explicit or not self._given_url():
            return explicit
        return urlsplit(self._given_url()).hostname or ""

    def _given_url(self) -> str:
        return (self.get(MASTER_URL_KEY) or "").strip().rstrip("/")

    @property
    def master_port(self) -> int:
        """The port of MASTER_URL when it is set, else MAC_MASTER_PORT."""
        given = self._given_url()
        if given:
            parts = urlsplit(given)
            try:
                explicit = parts.port
            except ValueError:
                raise ConfigError(f"MASTER_URL={given!r} has no valid port.") from None
            return explicit or (443 if parts.scheme == "https" else 80)
        return self.value("MAC_MASTER_PORT")

    @property
    def master_url(self) -> str:
        """MASTER_URL when set (it must be https:// with a CA pin), else
        http://MASTER_IP:MAC_MASTER_PORT."""
        given = self._given_url()
        if given:
            parts = urlsplit(given)
            if parts.scheme not in {"http", "https"} or not parts.hostname:
                raise ConfigError(
                    f"MASTER_URL={given!r} is not http(s)://<master>:<port> "
                    "(e.g. https://10.0.0.5:28443)."
                )
            if self.master_ca_pin and parts.scheme != "https":
                raise ConfigError(
                    f"{CA_PIN_KEY} is set, so the master is reached over TLS only, but "
                    f"MASTER_URL={given} is plain HTTP: set MASTER_URL=https://<master>:28443."
                )
            return given
        if self.master_ca_pin:
            raise ConfigError(
                f"{CA_PIN_KEY} is set, so the master is reached over TLS only: set "
                "MASTER_URL=https://<master>:28443 (the join line of `mac start master`)."
            )
        host = self.master_ip
        if ":" in host:  # a bare IPv6 address needs brackets in a URL
            host = f"[{host}]"
        return f"http://{host}:{self.master_port}"

    @property
    def master_ca_pin(self) -> str:
        """The master's CA pin (64 hex digits), or "" when the agent has none."""
        value = (self.get(CA_PIN_KEY) or "").strip()
        if not value:
            return ""
        try:
            return parse_pin(value)
        except ValueError as exc:
            raise ConfigError(f"{CA_PIN_KEY}: {exc}") from None

    @property
    def join_token(self) -> str:
        return (self.get("MAC_JOIN_TOKEN") or "").strip()

    @property
    def node_key(self) -> str:
        return (self.get(NODE_KEY) or "").strip()

    @property
    def api_token(self) -> str:
        """MAC_API_TOKEN: a master user's API token, for reading the inventory."""
        return (self.get("MAC_API_TOKEN") or "").strip()

    def node_name(self, hostname: str | None = None) -> tuple[str, Source | None]:
        """The name this node registers under: NODE_NAME, else the host name (lower-cased).

        An explicitly empty NODE_NAME stays empty so the caller can say so instead of
        silently registering under the host name.
        """
        value, source = self.lookup("NODE_NAME")
        if value is not None:
            return value.strip().lower(), source
        name = socket.gethostname() if hostname is None else hostname
        return name.strip().lower(), None

    def service_port(self, name: str) -> int:
        """MAC_<SERVICE>_PORT, else the table's port shifted by MAC_PORT_OFFSET."""
        return self.value(service_port_name(name))

    @property
    def state_dir(self) -> Path:
        explicit = self.value("MAC_STATE_DIR")
        if explicit:
            return explicit
        if os.geteuid() == 0:
            return Path(DEFAULT_STATE_DIR_ROOT)
        # Per host: a home on NFS must not mix the pid files of several nodes.
        return Path(DEFAULT_STATE_DIR_USER).expanduser() / (socket.gethostname() or "localhost")

    # Shared home detection ---------------------------------------------------------------
    def shared_home(self) -> tuple[bool, str]:
        """Whether the per-user file lives on a network filesystem, and what says so.

        MAC_SHARED_HOME=1/0 decides outright (for sites whose mounts look local);
        otherwise the mount holding the per-user file's directory is looked up.
        """
        try:
            forced = settings.values(self.environ.get)["MAC_SHARED_HOME"]
        except settings.SettingError as exc:
            raise ConfigError(str(exc)) from None
        if forced is not None:
            return forced, f"MAC_SHARED_HOME={int(forced)}"
        directory = self.user_file.parent
        # The directory may not exist yet: look at its closest existing ancestor.
        probe = directory
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        with contextlib.suppress(OSError):
            probe = probe.resolve()
        found = filesystem_of(probe, self.roots())
        if found and found[1] in NETWORK_FILESYSTEMS:
            return True, f"{probe} is on {found[1]} (mounted at {found[0]})"
        return False, ""


def node_config(roots: Roots, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """The node's `mac env` settings as an exporter reads them; in a container, the host's
    per-node file under rootfs (where `mac start agent` keeps MASTER_IP and the node key).

    An env file it cannot read is logged and left out: a service keeps serving (as with
    `value_or_default`) instead of crash-looping under its supervisor; `mac` itself
    stops on the same file with the fix."""
    environ = dict(os.environ if environ is None else environ)
    if roots.rootfs != "/" and not environ.get("MAC_NODE_ENV_FILE"):
        environ["MAC_NODE_ENV_FILE"] = str(roots.host(DEFAULT_NODE_ENV_FILE))
    return NodeConfig.load(environ, complain=log.error)
