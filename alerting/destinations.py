"""Where a notification channel may send: never inside the master (issue 22).

Alertmanager posts every alert to a webhook or Slack URL, from the master. A channel
aimed at the master's loopback, its own addresses or its own services (Prometheus,
Alertmanager, Redis), a link-local neighbour or a cloud metadata service would turn
the channel into a way to make the master send requests where only it can reach. The
policy is the one registration applies to node addresses (inventory.addresses):
loopback, link-local, unspecified, multicast and metadata addresses are refused, plus
the master's own; MAC_CHANNEL_ALLOWED_NETWORKS lets a site (or a test) allow some.

A host name is checked by what it resolves to now; a name that does not resolve is
left to Alertmanager, which cannot reach it either. (A name that later resolves
elsewhere is the DNS operator's choice; sites that worry pin the allowlist.)
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from inventory.addresses import METADATA_ADDRESSES, IPAddress

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def _resolve(host: str) -> list[IPAddress]:
    """The addresses `host` names now (an address names itself); [] when none."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    addresses = []
    for *_, sockaddr in found:
        addr = ipaddress.ip_address(sockaddr[0].split("%")[0])
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        addresses.append(addr)
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


def _service_addresses() -> set[IPAddress]:
    """Where the master's own servers are (their names under Docker resolve to the
    master's private network)."""
    urls = (settings.PROMETHEUS_URL, settings.ALERTMANAGER_URL, settings.REDIS_URL)
    return {addr for url in urls if (host := urlsplit(url).hostname) for addr in _resolve(host)}


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


def url_refusal(url: str) -> str:
    """Why a channel may not send to `url` ("" when it may), for the 400 naming the field."""
    host = urlsplit(url).hostname
    if not host:
        return ""  # the URL check names what is wrong with it
    allowed = settings.CHANNEL_ALLOWED_NETWORKS
    for addr in _resolve(host):
        if any(addr.version == net.version and addr in net for net in allowed):
            continue
        reason = why_inside(addr)
        if reason:
            named = host if host == str(addr) else f"{host} (resolves to {addr})"
            return (
                f"{named} is {reason}: a channel may not point inside the master. "
                "Use the receiver's address on the site's network, or allow it in "
                "MAC_CHANNEL_ALLOWED_NETWORKS."
            )
    return ""
