"""Which addresses the master agrees to probe, and where a request really came from.

The master connects to every registered node's address on a schedule, so a
registration is a request to make the master open connections. Taking any address
would let anyone aim it at cloud metadata services (169.254.169.254), link-local
neighbours or broadcast ranges, or smuggle such a target in through an odd textual
form (0xa9fea9fe, 2852039166, ::ffff:169.254.169.254, 6to4 wrappers...). So a node
address must be written in one canonical form, name one ordinary host, and fall in
MAC_NODE_NETWORKS when that allowlist is set. Loopback is allowed: simulated fleets
and the test suite run on 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Dotted quad, ASCII digits only, no leading zeros: anything else (hex, octal, one big
# integer, fewer than four parts) is refused rather than interpreted.
_DOTTED_QUAD = re.compile(r"(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}")
_IPV6_TEXT = re.compile(r"[0-9A-Fa-f:.]{2,45}")

# Well-known cloud metadata and host-agent endpoints that are not link-local.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wireserver
        "fd00:ec2::254",  # AWS IPv6 metadata
    )
)
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")


class AddressRefused(ValueError):
    """A node address the master will not probe; str() says why, for the 400 body."""


def parse_canonical(text: object) -> IPAddress:
    """Parse an address written in its one canonical textual form, or refuse it."""
    if not isinstance(text, str):
        raise AddressRefused("must be a string holding an IPv4 or IPv6 address.")
    if text == "":
        raise AddressRefused("must not be empty.")
    if text != text.strip() or any(ch.isspace() for ch in text):
        raise AddressRefused(f"{text!r} contains whitespace; send the bare address.")
    if ":" in text:
        if "%" in text or not _IPV6_TEXT.fullmatch(text):
            raise AddressRefused(f"{text!r} is not a plain IPv6 address (no zone ids or names).")
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise AddressRefused(f"{text!r} is not a valid IPv6 address.") from None
    if not _DOTTED_QUAD.fullmatch(text):
        raise AddressRefused(
            f"{text!r} is not a canonical dotted-quad IPv4 address "
            "(hex, octal, integer, short or zero-padded forms are refused)."
        )
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise AddressRefused(f"{text!r} is not a valid IPv4 address.") from None


def _forbidden_v4(addr: ipaddress.IPv4Address) -> str | None:
    if addr in METADATA_ADDRESSES:
        return "is a cloud metadata address"
    if addr.is_loopback:
        return None
    if addr in _THIS_NETWORK:
        return "is unspecified (0.0.0.0/8 means 'this host', not a node)"
    if addr.is_link_local:
        return "is link-local (169.254.0.0/16)"
    if addr.is_multicast:
        return "is multicast"
    if addr == ipaddress.IPv4Address("255.255.255.255"):
        return "is the broadcast address"
    if addr.is_reserved:
        return "is in a reserved range (240.0.0.0/4)"
    return None


def _forbidden_v6(addr: ipaddress.IPv6Address) -> str | None:
    if addr in METADATA_ADDRESSES:
        return "is a cloud metadata address"
    if addr.is_loopback:
        return None
    if addr.is_unspecified:
        return "is unspecified (::)"
    if addr.ipv4_mapped is not None:
        return "is an IPv4-mapped IPv6 address; send the IPv4 address itself"
    if addr in _IPV4_COMPATIBLE:
        return "is a deprecated IPv4-compatible IPv6 address"
    if addr.is_link_local:
        return "is link-local (fe80::/10)"
    if addr.is_multicast:
        return "is multicast"
    if addr in _SITE_LOCAL:
        return "is a deprecated site-local address (fec0::/10)"
    # Transition forms wrap an IPv4 address: refuse them when the wrapped one is refused.
    wrapped: list[ipaddress.IPv4Address] = []
    if addr.sixtofour is not None:
        wrapped.append(addr.sixtofour)
    if addr.teredo is not None:
        wrapped.extend(addr.teredo)
    if addr in _NAT64:
        wrapped.append(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    for inner in wrapped:
        reason = _forbidden_v4(inner)
        if reason:
            return f"wraps {inner}, which {reason}"
    return None


def in_networks(addr: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    """Whether any of `networks` holds `addr` (one of another IP version never does)."""
    return any(addr.version == net.version and addr in net for net in networks)


def check_node_address(text: object, networks: Sequence[IPNetwork] | None = None) -> str:
    """The canonical form of `text` if the master may probe it; AddressRefused otherwise.

    `networks` defaults to settings.NODE_NETWORKS (MAC_NODE_NETWORKS); an empty list
    means no allowlist.
    """
    addr = parse_canonical(text)
    reason = _forbidden_v4(addr) if addr.version == 4 else _forbidden_v6(addr)
    if reason:
        raise AddressRefused(f"{addr} {reason}; the master will not probe it.")
    allowed = settings.NODE_NETWORKS if networks is None else networks
    if allowed and not in_networks(addr, allowed):
        listed = ", ".join(str(net) for net in allowed)
        raise AddressRefused(f"{addr} is outside MAC_NODE_NETWORKS ({listed}).")
    return str(addr)


def _plain(text: str) -> IPAddress | None:
    """A socket-level address as the server saw it, IPv4-mapped forms unwrapped."""
    try:
        addr = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if addr.version == 6 and addr.ipv4_mapped is not None:
        # A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d; the peer is IPv4.
        return addr.ipv4_mapped
    return addr


def source_address(meta: dict, trusted_proxies: Sequence[IPNetwork] | None = None) -> str:
    """The address a request came from: REMOTE_ADDR, or X-Forwarded-For behind a trusted proxy.

    X-Forwarded-For is read right to left, skipping trusted proxies, so a client cannot
    forge its address by prepending entries. Returns "" when nothing usable is known.
    """
    proxies = settings.TRUSTED_PROXIES if trusted_proxies is None else trusted_proxies
    remote = _plain(meta.get("REMOTE_ADDR") or "")
    if remote is None:
        return ""

    if not proxies or not in_networks(remote, proxies):
        return str(remote)
    hops = [h for h in (meta.get("HTTP_X_FORWARDED_FOR") or "").split(",") if h.strip()]
    for hop in reversed(hops):
        addr = _plain(hop)
        if addr is None:
            return ""
        if not in_networks(addr, proxies):
            return str(addr)
    return str(remote)


# A per-client limit counts an IPv6 client by its /64: the smallest block a host or a
# site's LAN is given (RFC 6177), inside which it could take a new address per request.
IPV6_COUNTED_PREFIX = 64


def counted_address(address: str) -> str:
    """What a per-client limit counts for `address`: an IPv4 address itself, an IPv6
    one's /64 (as its first address, "2001:db8:1:2::"); "" stays ""."""
    plain = _plain(address) if address else None
    if plain is None or plain.version == 4:
        return str(plain) if plain is not None else address
    network = ipaddress.ip_network(f"{plain}/{IPV6_COUNTED_PREFIX}", strict=False)
    return str(network.network_address)
