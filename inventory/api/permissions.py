"""Who may call the agent endpoints: the cluster join token (MAC_JOIN_TOKEN).

The join token is modelled as a DRF authentication class so that a missing or wrong
token is a 401 carrying `WWW-Authenticate: Bearer`, and a valid one marks the request
(request.auth) as vouched for, which is what lets a claimed "ip" be honoured.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from contract.bearer import bearer_token, token_matches

JOIN_TOKEN_HINT = "send the cluster join token as 'Authorization: Bearer <MAC_JOIN_TOKEN>'."  # noqa: S105 - a hint, not a secret


class JoinToken:
    """request.auth after a valid join token: the request is vouched for by the cluster."""

    def __repr__(self) -> str:
        return "JoinToken(valid)"


VALID_JOIN_TOKEN = JoinToken()


class JoinTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <join token>`; a no-op while MAC_JOIN_TOKEN is unset."""

    def authenticate(self, request):
        if not settings.JOIN_TOKEN:
            return None
        header = get_authorization_header(request)
        if not header:
            return None
        presented = bearer_token(header.decode("latin-1"))
        if presented is None:
            raise AuthenticationFailed(f"Malformed Authorization header: {JOIN_TOKEN_HINT}")
        if not token_matches(presented, settings.JOIN_TOKEN):
            raise AuthenticationFailed(
                "The join token is wrong; use the value of MAC_JOIN_TOKEN on the master."
            )
        return AnonymousUser(), VALID_JOIN_TOKEN

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="mac"'


class JoinTokenRequired(BasePermission):
    """Registration needs the join token whenever the master has one configured."""

    message = f"Registration needs the cluster join token: {JOIN_TOKEN_HINT}"

    def has_permission(self, request, view) -> bool:
        return not settings.JOIN_TOKEN or request.auth is VALID_JOIN_TOKEN


class JoinTokenScheme(OpenApiAuthenticationExtension):
    """Describes the join token in the OpenAPI schema (drf-spectacular finds it by class)."""

    target_class = JoinTokenAuthentication
    name = "joinToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "The cluster join token (MAC_JOIN_TOKEN), when the master sets one.",
        }


class JoinTokenOptionalSchema(AutoSchema):
    """The schema of an endpoint that needs the join token only when one is configured.

    Without MAC_JOIN_TOKEN the operation also lists the empty requirement `{}`, which is
    how OpenAPI says "no credentials needed"; the schema is built per request, so it
    follows the setting of the running master.
    """

    def get_auth(self) -> list[dict]:
        auth = super().get_auth()
        return auth if settings.JOIN_TOKEN else [*auth, {}]
