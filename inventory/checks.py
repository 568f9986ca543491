"""System checks for the registration settings: a bad value stops start-up, naming it;
a risky one is warned about at every start (migrate runs the database's checks)."""

from __future__ import annotations

import re
from ipaddress import ip_address

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError

from inventory.addresses import in_networks

# What DRF's throttles understand: "<count>/<s|sec|second|m|min|minute|h|hour|d|day>".
_RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


@register()
def check_register_rate(app_configs=None, **kwargs) -> list[Error]:
    rate = settings.REGISTER_RATE
    if isinstance(rate, str) and _RATE.fullmatch(rate):
        return []
    return [
        Error(
            f"MAC_REGISTER_RATE={rate!r} is not a rate.",
            hint="Use <count>/<period>, e.g. 600/min, 20/s or 10000/hour.",
            id="inventory.E001",
        )
    ]


# Nodes named in the warning; the count says how many more.
NAMED_NODES = 3


@register(Tags.database)
def check_trusted_proxies(app_configs=None, databases=None, **kwargs) -> list[Warning]:
    """Registered nodes whose address MAC_TRUSTED_PROXIES holds: the proxy believes their
    X-Forwarded-For, so each could speak as any address (register another node's address
    without its key, spend another address's rate limit). A too-broad network is the
    usual cause (10.0.0.0/8 where the load balancer is 10.1.2.3)."""
    networks = settings.TRUSTED_PROXIES
    if not networks or not databases:
        return []
    from inventory.models import Node

    try:
        nodes = list(Node.objects.order_by("hostname").values_list("hostname", "ip"))
    except DatabaseError:
        return []  # not migrated yet: no node to warn about
    inside = [(name, ip) for name, ip in nodes if in_networks(ip_address(ip), networks)]
    if not inside:
        return []
    named = ", ".join(f"{name} at {ip}" for name, ip in inside[:NAMED_NODES])
    more = f" and {len(inside) - NAMED_NODES} more" if len(inside) > NAMED_NODES else ""
    shown = ",".join(str(network) for network in networks)
    return [
        Warning(
            f"MAC_TRUSTED_PROXIES={shown} holds the address of {len(inside)} registered "
            f"node(s) ({named}{more}): their X-Forwarded-For is believed, so each could "
            "register, deregister and be counted as any address.",
            hint="Name only the reverse proxies' own addresses (docs/security.md, "
            "Client addresses).",
            id="inventory.W001",
        )
    ]
