"""ALLOWED_HOSTS: the names and addresses the master answers to (issue 31).

Django believes the Host header of every request it accepts, and builds absolute links
from it; with `ALLOWED_HOSTS = ["*"]` anyone could send `Host: evil.example` and have a
link to their own site built (the poisoning of password-reset mails). The master now
answers only to what names it:

- loopback: `localhost`, `127.0.0.1`, `[::1]`;
- this host's name, and the names `mac start master` works out for the server
  certificate (MAC_TLS_HOST_NAMES: the address agents use, the host name, its FQDN,
  the bind address), with MAC_TLS_NAMES and MAC_PUBLIC_URL's host;
- the Compose service names the master's own containers reach each other by
  (`api-server`, `proxy` and their container names: Prometheus scrapes
  `mac-proxy:28443`, the scale-out scrapers read http_sd at `api-server:28080`);
- every address of this host's network interfaces as they are now: an address that
  comes up after the master started (DHCP late at boot, a new interface) is answered
  without a restart. Under
  Docker the container sees its own interfaces: `mac` passes the host's addresses at
  each start (MAC_HOST_ADDRESSES);
- MAC_ALLOWED_HOSTS: more, in Django's patterns (`.example.org` is the domain and every
  name under it); `*` answers to any Host, as before.

Any other Host gets 400 naming it and the settings that add it (macweb.urls).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from urllib.parse import urlsplit

import psutil

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# The names the master's own containers use for each other (docker-compose.master.yml).
COMPOSE_NAMES = ("api-server", "mac-api-server", "proxy", "mac-proxy")


def host_pattern(name: str) -> str:
    """`name` as Django compares a Host: lower case, an IPv6 address in brackets."""
    name = name.strip().lower()
    bare = name.strip("[]")
    try:
        address = ipaddress.ip_address(bare.split("%")[0])
    except ValueError:
        return name.rstrip(".")
    return f"[{address}]" if address.version == 6 else str(address)


def interface_addresses() -> list[str]:
    """Every address of this host's network interfaces now (IPv4 and IPv6); the master's
    layers may not import node.host, which reads the same for `mac`."""
    found = []
    for addresses in psutil.net_if_addrs().values():
        for entry in addresses:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                found.append(host_pattern(entry.address))
    return found


def public_url_host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


class MasterHosts(list):
    """The fixed names, then this host's addresses (see the module).

    Django reads ALLOWED_HOSTS at every request (HttpRequest.get_host walks it until a
    pattern matches), so the addresses seen last come after the names, and a walk that
    found nothing looks at the interfaces again before it ends: an address that came up
    since is answered at once. A match costs nothing; a miss, one look at the interfaces
    (psutil, tens of microseconds). It is a list because Django's settings insist on one;
    the list itself holds the fixed names.
    """

    def __init__(
        self, names: Iterable[str], addresses: Callable[[], list[str]] = interface_addresses
    ) -> None:
        super().__init__(dict.fromkeys(host_pattern(n) for n in names if n and n.strip()))
        self._addresses = addresses
        self._seen: list[str] = []

    def _look(self) -> list[str]:
        with contextlib.suppress(OSError):  # else keep what was seen last
            self._seen = [host_pattern(address) for address in self._addresses()]
        return self._seen

    def __iter__(self) -> Iterator[str]:
        fixed = list(super().__iter__())
        yield from fixed
        given = set(fixed)
        for addresses in (self._seen, self._look()):
            for address in addresses:
                if address not in given:
                    given.add(address)
                    yield address

    def _all(self) -> list[str]:
        # A comprehension, not list(self): that asks len(), which walks again.
        return [pattern for pattern in self]

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index):
        return self._all()[index]

    def __contains__(self, value: object) -> bool:
        return any(value == pattern for pattern in self)

    def __repr__(self) -> str:
        return f"MasterHosts({self._all()!r})"


def master_hosts(
    *,
    extra: Sequence[str],
    tls_names: Sequence[str],
    host_names: Sequence[str],
    host_addresses: Sequence[str],
    public_url: str,
) -> Sequence[str]:
    """ALLOWED_HOSTS from the settings (`extra` is MAC_ALLOWED_HOSTS)."""
    if "*" in extra:
        return ["*"]
    names = [
        *LOOPBACK_NAMES,
        socket.gethostname(),
        *host_names,
        *tls_names,
        public_url_host(public_url),
        *COMPOSE_NAMES,
        *host_addresses,
        *extra,
    ]
    return MasterHosts(names)
