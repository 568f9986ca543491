"""Cookies set over HTTPS are Secure (issue 31).

A session or CSRF cookie that a browser got over HTTPS must never travel back over
plain HTTP, where anyone on the path reads it. Django's SESSION_COOKIE_SECURE and
CSRF_COOKIE_SECURE are all-or-nothing, and would break the master's own plain HTTP on
loopback (`scripts/run` on a laptop, http://localhost:28080/), so the flag follows the
request instead: every cookie of an answer to an HTTPS request is Secure. Whether a
request came over HTTPS is what nginx says (X-Forwarded-Proto, SECURE_PROXY_SSL_HEADER).
"""

from __future__ import annotations


class SecureCookiesOverHttps:
    """Marks every cookie of an HTTPS answer Secure (session, CSRF, messages)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.is_secure():
            for morsel in response.cookies.values():
                morsel["secure"] = True
        return response
