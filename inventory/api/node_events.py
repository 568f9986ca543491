"""POST /api/v1/nodes/self/events: what an agent reports into its own node's history.

Today one kind: `ip_forward_reset`, sent by sys-manager each time net.ipv4.ip_forward
drops to 0 on the node (exporters.ipforward_report). The caller proves who it is with
its node key, as for /self; the body is small, strictly typed and bounded, and each
refusal names its field. Reports are rate-limited per node key (NODE_EVENT_RATE, DRF's
throttle in inventory.api.throttles), so a flapping link cannot flood the history.

Kept apart from views.py and serializers.py on purpose: one endpoint, its serializer,
its rate limit, over inventory.services.record_ip_forward_reset.
"""

from __future__ import annotations

import datetime as dt
import logging
import re

from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    parser_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from contract.services import NODE_KEY_HEADER
from inventory import services
from inventory.api.parsers import LimitedJSONParser
from inventory.api.throttles import NODE_EVENT_RATE, NodeEventRateThrottle
from inventory.choices import EventKind
from inventory.models import NodeEvent

log = logging.getLogger(__name__)

MAX_CLOCK_SKEW = dt.timedelta(minutes=5)  # how far in the future an agent's clock may be
MAX_AGE = dt.timedelta(days=30)  # reports older than this are refused, not stored
MAX_RESETS = 1_000_000
LINK_PATTERN = r"^[A-Za-z0-9_.:@-]*$"  # a Linux interface name: no '/', no blanks, no NUL


class _Strict:
    """Refuse values of the wrong JSON type instead of converting them."""

    json_types: tuple[type, ...] = (str,)
    json_name = "string"

    def to_internal_value(self, data):
        # bool is an int in Python, not in JSON: true is no count of resets.
        wrong_bool = isinstance(data, bool) and bool not in self.json_types
        if wrong_bool or not isinstance(data, self.json_types):
            raise serializers.ValidationError(f"Must be a JSON {self.json_name}.")
        return super().to_internal_value(data)


# The end of an ISO 8601 date and time with its offset: Z, +01:00, -0500 or +01.
_WITH_OFFSET = re.compile(r"T\d{2}:\d{2}.*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$")


class _StrictDateTime(_Strict, serializers.DateTimeField):
    json_name = "string (ISO 8601 date and time)"

    def to_internal_value(self, data):
        if isinstance(data, str) and not _WITH_OFFSET.search(data.strip()):
            # A bare date, or a time without its offset, would be read as UTC: a node
            # whose clock is not on UTC would record shifted times.
            raise serializers.ValidationError(
                "Give a date and time with its offset, e.g. 2026-12-06T14:02:11+01:00."
            )
        when = super().to_internal_value(data)
        now = timezone.now()
        if when > now + MAX_CLOCK_SKEW:
            raise serializers.ValidationError("Is in the future (check the node's clock).")
        if when < now - MAX_AGE:
            raise serializers.ValidationError(f"Is older than {MAX_AGE.days} days.")
        return when


class _StrictLink(_Strict, serializers.RegexField):
    def to_internal_value(self, data):
        # The schema's $ (ECMA) ends the text; Python's re also lets it match before a
        # final newline, which would then reach the event's message.
        if isinstance(data, str) and data.endswith("\n"):
            raise serializers.ValidationError("Must be an interface name, without a newline.")
        return super().to_internal_value(data)


class _StrictBoolean(_Strict, serializers.BooleanField):
    json_types = (bool,)
    json_name = "boolean"


class _StrictInteger(_Strict, serializers.IntegerField):
    json_types = (int,)
    json_name = "integer"


@extend_schema_field({"type": "string", "const": EventKind.IP_FORWARD_RESET.value})
class _ReportedKind(serializers.ChoiceField):
    """The one kind an agent may report (a const: EventKind owns the name KindEnum)."""

    def __init__(self, **kwargs) -> None:
        kind = EventKind.IP_FORWARD_RESET
        super().__init__(choices=[(kind.value, kind.label)], **kwargs)


class NodeEventReportSerializer(serializers.Serializer):
    """Body of POST /api/v1/nodes/self/events."""

    kind = _ReportedKind()
    when = _StrictDateTime(help_text="When the node saw the reset (ISO 8601, with its offset).")
    link = _StrictLink(
        LINK_PATTERN,
        max_length=15,
        allow_blank=True,
        trim_whitespace=False,
        default="",
        help_text="The link that gained carrier just before, where journald tells; else empty.",
    )
    carrier_at = _StrictDateTime(
        allow_null=True, default=None, help_text="When that link gained carrier."
    )
    reasserted = _StrictBoolean(
        default=False, help_text="sys-manager set forwarding back to 1 (MAC_IPFORWARD_REASSERT=1)."
    )
    resets = _StrictInteger(
        min_value=1,
        max_value=MAX_RESETS,
        default=1,
        help_text="How many resets this report stands for (more than 1 after a long outage).",
    )


class NodeEventResponseSerializer(serializers.ModelSerializer):
    class Meta:
        model = NodeEvent
        fields = ["id", "hostname", "kind", "message", "data", "created_at"]


_ERROR = {"type": "object", "properties": {"detail": {"type": "string"}}}


@extend_schema(
    operation_id="self_events_create",
    summary="Add an event to the calling node's history (sys-manager's ip_forward resets)",
    description=f"Authenticated by {NODE_KEY_HEADER}; rate-limited to {NODE_EVENT_RATE} per "
    "node. The only kind is ip_forward_reset.",
    request=NodeEventReportSerializer,
    parameters=[
        OpenApiParameter(
            NODE_KEY_HEADER,
            location=OpenApiParameter.HEADER,
            required=True,
            description="The node's key.",
        )
    ],
    responses={
        201: NodeEventResponseSerializer,
        400: OpenApiResponse(
            {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
            description='{"<field>": ["message"]}: the field at fault ("body": the body).',
        ),
        403: OpenApiResponse(_ERROR, description="node key missing or wrong"),
        429: OpenApiResponse(_ERROR, description="rate limit, with Retry-After"),
    },
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
@parser_classes([LimitedJSONParser])
@throttle_classes([NodeEventRateThrottle])
def node_self_events(request):
    node = services.node_for_key(request.headers.get(NODE_KEY_HEADER))
    if node is None:
        return Response(
            {
                "detail": f"{NODE_KEY_HEADER} is missing or matches no node; register first "
                "(mac start agent) or ask an admin to reset the node's key."
            },
            status=status.HTTP_403_FORBIDDEN,
        )
    meta = request.META
    if "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and not meta.get(
        "CONTENT_LENGTH"
    ):
        raise ValidationError({"body": ["chunked request bodies are not accepted."]})
    body = NodeEventReportSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    data = dict(body.validated_data)
    data.pop("kind")  # one kind today: what record_ip_forward_reset records
    event = services.record_ip_forward_reset(node, **data)
    return Response(NodeEventResponseSerializer(event).data, status=status.HTTP_201_CREATED)
