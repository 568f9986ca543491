"""Throttling of password logins (admin and dashboard), with django-axes.

Every failed password login is counted per client address (the address MAC itself
believes: inventory.addresses.source_address, so MAC_TRUSTED_PROXIES decides here
too; an IPv6 client by its /64, which it could otherwise walk through). After
MAC_LOGIN_FAILURE_LIMIT failures that address is refused for MAC_LOGIN_COOLOFF_MINUTES
with a 429 saying so; a successful login resets the count.
"""

from __future__ import annotations

import math

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from inventory.addresses import IPV6_COUNTED_PREFIX, counted_address, source_address


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check, for logins that come in over HTTP.

    authenticate() without a request (management commands, a test client's login())
    has no client address to count against, so it is left to the next backend
    instead of failing as Axes does.
    """

    def authenticate(self, request: HttpRequest | None, username=None, password=None, **kw):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kw)


def client_ip(request: HttpRequest) -> str | None:
    """The address failures are counted against, an IPv6 client's /64 as its first
    address (inventory.addresses.counted_address); None when the request has none (a
    login made in-process, such as a test client's force_login)."""
    return counted_address(source_address(request.META)) or None


def _shown(address: str | None) -> str:
    if not address:
        return "this address"
    return f"{address}/{IPV6_COUNTED_PREFIX}" if ":" in address else address


def lockout_response(request: HttpRequest, original_response=None, credentials=None):
    cool_off = get_cool_off(request)
    minutes = math.ceil(cool_off.total_seconds() / 60) if cool_off else None
    wait = f"try again in {minutes} minute(s)" if minutes else "ask an admin to unlock it"
    counted = client_ip(request)
    response = HttpResponse(
        f"Too many failed logins from {_shown(counted)} "
        f"({settings.AXES_FAILURE_LIMIT}, MAC_LOGIN_FAILURE_LIMIT): logins from there "
        f"are refused for now; {wait}. An admin can lift it at once with "
        f"`python -m django axes_reset_ip {counted or '<address>'}` on the "
        "master.\n",
        status=429,
        content_type="text/plain; charset=utf-8",
    )
    if cool_off:
        response["Retry-After"] = str(math.ceil(cool_off.total_seconds()))
    return response
