"""Password reset whose links go where people reach the master, never where a request
said it was (issue 31).

Django builds the reset link from the request's Host unless told otherwise; a forged
Host would put a stranger's site in a mail that carries a valid reset token. The link is
built from MAC_PUBLIC_URL instead (the same address the notifications link to), and
Host itself is checked against the master's names (macweb.hosts).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.views import PasswordResetView

# What `mac start master` would derive on a laptop; it always sets MAC_PUBLIC_URL itself.
FALLBACK_PUBLIC_URL = "http://localhost:28080"


def public_url() -> str:
    """The front door as people reach it, without a trailing slash."""
    return (settings.PUBLIC_URL or FALLBACK_PUBLIC_URL).rstrip("/")


class PublicUrlPasswordResetForm(PasswordResetForm):
    """Django's reset form, with the link's scheme and address from MAC_PUBLIC_URL."""

    def save(self, **kwargs) -> None:
        public = urlsplit(public_url())
        # Django writes {protocol}://{domain}/accounts/reset/...: the domain carries the
        # URL's path too, for a master published under a prefix.
        kwargs["domain_override"] = f"{public.netloc}{public.path}"
        kwargs["use_https"] = public.scheme == "https"
        super().save(**kwargs)


class PasswordReset(PasswordResetView):
    form_class = PublicUrlPasswordResetForm
