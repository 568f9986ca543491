"""The base of staff's changes through the API (a node's maintenance, a GPU's fault
history): an API token or the dashboard's session, staff only, and the answers each
documents beside its own."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import IsAdminUser
from rest_framework.views import APIView


class StaffView(APIView):
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAdminUser]


def staff_responses(ok, **errors: str) -> dict:
    """The schema's answers: `ok` for 200, 401 and 403 as for every staff change, and
    the view's own errors by status (`e400="..."`)."""
    return {
        200: ok,
        **{int(code[1:]): OpenApiResponse(description=words) for code, words in errors.items()},
        401: OpenApiResponse(description="no session and no valid API token"),
        403: OpenApiResponse(description="the user is not staff"),
    }
