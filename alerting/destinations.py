"""Where a notification channel may send: never inside the master (issues 22 and 31).

Alertmanager sends every notification from the master: a webhook or Slack URL, or an
email channel's SMTP server. A channel aimed at the master's loopback, its own
addresses or its own services (Prometheus, Alertmanager, Redis), a link-local neighbour
or a cloud metadata service would make the master send requests where only it can
reach. The policy is the one registration applies to node addresses
(inventory.addresses): loopback, link-local, unspecified, multicast and metadata
addresses are refused, plus the master's own; MAC_CHANNEL_ALLOWED_NETWORKS lets a site
(or a test) allow some, and even then not the ports of the master's own servers.

A channel's host is looked up, and every address it names checked:

- when the channel is saved (API, admin, the MAC_ALERT_* variables): a name that does
  not resolve, or that names any address inside, is refused with the field named;
- each time alertmanager.yml is generated (alerting.amconfig.build), and at every poll
  of beat (alerting.services.destinations_moved): a channel whose name now resolves
  inside, or not at all, is held back, pending with the reason, left out of the routes,
  and /health says so; it is put back once its name resolves outside again.

Alertmanager never follows a redirect (`follow_redirects: false` in every http_config,
alerting.amconfig), so an answer `307 Location: http://127.0.0.1/...` reaches nothing.

The limit that remains: Alertmanager looks the name up again itself when it sends. A
name re-pointed inside between MAC's last check and that lookup (a short TTL, DNS
rebinding) is followed until the next poll holds the channel back. A site that cannot
accept that gives addresses rather than names (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from socket import getaddrinfo  # the one lookup of a channel's host (tests stand in a DNS)
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings

from alerting.choices import ChannelKind
from contract.services import MASTER_API_PORT, MASTER_TLS_PORT
from inventory.addresses import METADATA_ADDRESSES, IPAddress, in_networks

if TYPE_CHECKING:
    from alerting.models import NotificationChannel

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Unresolvable(Exception):
    """The host names no address now; str() is the resolver's reason."""


@dataclass(frozen=True)
class Destination:
    """Where a channel sends: the field that says so, the host and the port."""

    field: str
    host: str
    port: int


def destination(channel: NotificationChannel) -> Destination | None:
    """The channel's host and port, None when its own fields are still wrong."""
    if channel.kind == ChannelKind.EMAIL:
        host = channel.smtp_host.strip().strip("[]")
        return Destination("smtp_host", host, channel.smtp_port) if host else None
    try:
        parts = urlsplit(channel.url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or not port:
        return None
    return Destination("url", parts.hostname, port)


def resolve(host: str) -> list[IPAddress]:
    """The addresses `host` names now (an address names itself); raises Unresolvable."""
    try:
        found = getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise Unresolvable(exc.strerror or str(exc)) from None
    except (UnicodeError, OSError) as exc:
        raise Unresolvable(str(exc)) from None
    addresses = []
    for *_, sockaddr in found:
        addr = ipaddress.ip_address(sockaddr[0].split("%")[0])
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        addresses.append(addr)
    if not addresses:
        raise Unresolvable("no address")
    return list(dict.fromkeys(addresses))


def _is_own_address(addr: IPAddress) -> bool:
    """Whether `addr` belongs to this host: only an own address can be bound."""
    family = socket.AF_INET if addr.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(addr), 0))
        except OSError:
            return False
    return True


def _service_urls() -> dict[str, str]:
    """The master's own servers, by the words a refusal names them with."""
    urls = {
        "Redis": settings.REDIS_URL,
        "Celery broker": settings.CELERY_BROKER_URL,
        "Prometheus": settings.PROMETHEUS_URL,
        "Alertmanager": settings.ALERTMANAGER_URL,
        "targets view": settings.TARGETS_URL,
    }
    urls.update({f"scraper {n}": url for n, url in enumerate(settings.SCRAPER_URLS, 1)})
    return urls


def _service_addresses() -> set[IPAddress]:
    """Where the master's own servers are (their names under Docker resolve to the
    master's private network)."""
    found: set[IPAddress] = set()
    for url in _service_urls().values():
        host = urlsplit(url).hostname
        if host:
            try:
                found.update(resolve(host))
            except Unresolvable:
                continue
    return found


def _service_ports() -> dict[int, str]:
    """The ports of the master's own servers: closed to a channel even where the site
    allows its addresses (an SMTP dialogue aimed at Redis is Redis commands)."""
    ports = {MASTER_API_PORT: "front door (HTTP)", MASTER_TLS_PORT: "front door (HTTPS)"}
    database = settings.DATABASES["default"]
    if "postgresql" in database["ENGINE"]:
        ports[int(database.get("PORT") or 5432)] = "PostgreSQL"
    for name, url in _service_urls().items():
        try:
            port = urlsplit(url).port
        except ValueError:
            continue
        if port:
            ports.setdefault(port, name)
    return ports


def why_inside(addr: IPAddress) -> str:
    """Why the master may not send to `addr` ("" when it may)."""
    if addr in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if addr.is_loopback:
        return "a loopback address"
    if addr.is_link_local:
        return "a link-local address"
    if addr.is_unspecified or (addr.version == 4 and addr in _THIS_NETWORK):
        return "an unspecified address"
    if addr.is_multicast:
        return "a multicast address"
    if _is_own_address(addr):
        return "one of the master's own addresses"
    if addr in _service_addresses():
        return "the address of one of the master's own services"
    return ""


def _allowed(addr: IPAddress) -> bool:
    return in_networks(addr, settings.CHANNEL_ALLOWED_NETWORKS)


def refusal(where: Destination, *, again: bool = False, unresolved_ok: bool = False) -> str:
    """Why a channel may not send to `where` ("" when it may); `again`: a saved channel's
    later check, worded as such. `unresolved_ok`: a name that does not resolve passes
    (the generation holds the channel back until it does)."""
    try:
        addresses = resolve(where.host)
    except Unresolvable as exc:
        if unresolved_ok:
            return ""
        return (
            f"{where.host} does not resolve{' any more' if again else ''} ({exc}): give a "
            "name the master's DNS knows, or the receiver's address"
        )
    for addr in addresses:
        reason = why_inside(addr)
        if not reason:
            continue
        named = where.host
        if where.host != str(addr):
            named += f" ({'now ' if again else ''}resolves to {addr})"
        if not _allowed(addr):
            return (
                f"{named} is {reason}: a channel may not point inside the master. "
                "Use the receiver's address on the site's network, or allow it in "
                "MAC_CHANNEL_ALLOWED_NETWORKS."
            )
        service = _service_ports().get(where.port)
        if service:
            return (
                f"{named}, port {where.port}, is the master's own {service}: a channel may "
                "not point at it, even where MAC_CHANNEL_ALLOWED_NETWORKS allows the address."
            )
    return ""


def held_back(channel: NotificationChannel) -> str:
    """Why a saved channel is left out of alertmanager.yml now ("" when it is not)."""
    where = destination(channel)
    if where is None:
        return ""
    why = refusal(where, again=True)
    if not why:
        return ""
    return (
        f"{why}. It is left out of alertmanager.yml; MAC looks again at every poll "
        f"(every {settings.ALERT_POLL_INTERVAL:g} s) and puts it back once the name "
        "resolves outside the master"
    )
