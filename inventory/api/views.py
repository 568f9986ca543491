"""Views of the nodes API: thin adapters from HTTP to inventory.services.

The agent endpoints (register, deregister, self) take no session or DRF token: they
authenticate with the join token and the per-node key, so they are CSRF-free by
construction. The nodes list and detail need a logged-in user or an API token.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics, status, viewsets
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import NotAuthenticated, ValidationError
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import exception_handler

from contract.services import NODE_KEY_HEADER
from inventory import services
from inventory.addresses import AddressRefused, check_node_address, source_address
from inventory.api.ordering import StrictOrderingFilter
from inventory.api.pagination import StrictLimitOffsetPagination
from inventory.api.parsers import LimitedJSONParser, body_too_large
from inventory.api.permissions import (
    VALID_JOIN_TOKEN,
    JoinTokenAuthentication,
    JoinTokenOptionalSchema,
    JoinTokenRequired,
)
from inventory.api.serializers import (
    DeregistrationResponseSerializer,
    DeregistrationSerializer,
    ErrorSerializer,
    GpuHealthSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    RegistrationResponseSerializer,
    RegistrationSerializer,
)
from inventory.api.throttles import DeregisterRateThrottle, NodeKeyRateThrottle
from inventory.filtersets import NodeFilterSet
from inventory.models import Node

log = logging.getLogger(__name__)

# A full inventory does not empty itself soon; tell clients to come back much later.
NODE_CAP_RETRY_AFTER = 300

NODE_KEY_PARAMETER = OpenApiParameter(
    NODE_KEY_HEADER,
    location=OpenApiParameter.HEADER,
    required=False,
    description="The per-node key returned as node_key by the node's first registration.",
)
NODE_KEY_REQUIRED = OpenApiParameter(
    NODE_KEY_HEADER, location=OpenApiParameter.HEADER, required=True, description="The node's key."
)
_MESSAGES = {"type": "array", "items": {"type": "string"}}
BAD_REQUEST = OpenApiResponse(
    {
        "type": "object",
        "additionalProperties": {
            # A list or dict field nests its messages under the item's index or key.
            "anyOf": [
                _MESSAGES,
                {
                    "type": "object",
                    "additionalProperties": {"anyOf": [_MESSAGES, {"type": "object"}]},
                },
            ]
        },
    },
    description='{"<field>": ["message"]}: the field at fault ("body" for the body itself); '
    'list and object fields nest the messages under the item: {"nics": {"0": ["..."]}}.',
)
NOT_AUTHENTICATED = OpenApiResponse(
    ErrorSerializer, description="no session and no valid API token (Authorization: Token ...)"
)


def _error(message: str, code: int, headers: dict | None = None) -> Response:
    return Response({"detail": message}, status=code, headers=headers)


def _agent_exception_handler(exc, context):
    # Django raises RequestDataTooBig when the body is read through HttpRequest.body
    # (as DRF does once anything has touched the stream); LimitedJSONParser covers the
    # streamed path. Either way the agent gets a 400 naming the body, not a 500.
    if isinstance(exc, RequestDataTooBig):
        exc = body_too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return exception_handler(exc, context)


class AgentAPIView(generics.GenericAPIView):
    """Base of the endpoints agents call: JSON only, no session, their own checks."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    parser_classes = [LimitedJSONParser]

    def get_exception_handler(self):
        return _agent_exception_handler

    def initial(self, request, *args, **kwargs):
        meta = request.META
        chunked = "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not meta.get("CONTENT_LENGTH"):
            # DRF would read such a body as empty and answer "hostname is required".
            raise ValidationError(
                {"body": ["chunked request bodies are not accepted; send a Content-Length."]}
            )
        super().initial(request, *args, **kwargs)

    def node_key(self) -> str | None:
        return self.request.headers.get(NODE_KEY_HEADER) or None

    def permission_denied(self, request, message=None, code=None):
        if request.authenticators and not request.successful_authenticator:
            # A 401 whose text says which header is missing, not DRF's generic one.
            raise NotAuthenticated(detail=message)
        super().permission_denied(request, message=message, code=code)


class RegisterView(AgentAPIView):
    serializer_class = RegistrationSerializer
    authentication_classes = [JoinTokenAuthentication]
    schema = JoinTokenOptionalSchema()
    permission_classes = [JoinTokenRequired]
    throttle_classes = [NodeKeyRateThrottle]

    @extend_schema(
        operation_id="register",
        summary="Register a node (or re-register it)",
        description="Dedupes by hostname, then by IP. 201 for a new node, 200 for an existing "
        f"one. Moving a known hostname to another address needs {NODE_KEY_HEADER}.",
        request=RegistrationSerializer,
        parameters=[NODE_KEY_PARAMETER],
        responses={
            201: RegistrationResponseSerializer,
            200: RegistrationResponseSerializer,
            400: BAD_REQUEST,
            401: OpenApiResponse(ErrorSerializer, description="join token missing or wrong"),
            403: OpenApiResponse(ErrorSerializer, description="node key needed"),
            409: OpenApiResponse(ErrorSerializer, description="address held by another node"),
            429: OpenApiResponse(ErrorSerializer, description="rate limit or node cap"),
        },
        examples=[
            OpenApiExample(
                "agent",
                request_only=True,
                value={
                    "hostname": "gpu-01",
                    "gpu_vendor": "nvidia",
                    "gpu_count": 8,
                    "exporters": {"sys-exporter": 29101, "dcgm-exporter": 29150},
                    "agent_version": "0.1.0",
                    "labels": {"rack": "a1"},
                },
            )
        ],
    )
    def post(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        claimed = data.pop("ip", None)
        vouched = request.auth is VALID_JOIN_TOKEN
        address = claimed if claimed is not None and vouched else source_address(request.META)
        try:
            data["ip"] = check_node_address(address)
        except AddressRefused as exc:
            raise ValidationError({"ip": [str(exc)]}) from None
        try:
            result = services.register_node(
                services.Registration(**data),
                source=source_address(request.META),
                node_key=self.node_key(),
            )
        except services.NodeKeyRequired as exc:
            return _error(str(exc), status.HTTP_403_FORBIDDEN)
        except services.AddressTaken as exc:
            return _error(str(exc), status.HTTP_409_CONFLICT)
        except services.NodeLimitReached as exc:
            return _error(
                str(exc),
                status.HTTP_429_TOO_MANY_REQUESTS,
                {"Retry-After": str(NODE_CAP_RETRY_AFTER)},
            )
        except services.RegistrationError as exc:
            return _error(str(exc), status.HTTP_503_SERVICE_UNAVAILABLE, {"Retry-After": "5"})
        context = self.get_serializer_context()
        # A new node's history is the event just recorded: no query for it.
        context.update(recent_events=result.history, node_key=result.node_key)
        body = RegistrationResponseSerializer(result.node, context=context).data
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(body, status=code)


class DeregisterView(AgentAPIView):
    serializer_class = DeregistrationSerializer
    throttle_classes = [DeregisterRateThrottle]

    @extend_schema(
        operation_id="deregister",
        summary="Deregister a node (what `mac stop agent` does)",
        request=DeregistrationSerializer,
        parameters=[NODE_KEY_REQUIRED],
        responses={
            200: DeregistrationResponseSerializer,
            400: BAD_REQUEST,
            403: OpenApiResponse(
                ErrorSerializer, description="no node key, or another registered node's key"
            ),
            404: OpenApiResponse(
                ErrorSerializer,
                description="no registered node holds the key sent, whatever the hostname "
                "(a refusal never tells whether a name is registered)",
            ),
            429: OpenApiResponse(ErrorSerializer, description="rate limit"),
        },
    )
    def post(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        hostname = serializer.validated_data["hostname"]
        if self.node_key() is None:
            # Refused before the lookup: without a key, whether the name exists is not told.
            return _error(
                f"deregistering {hostname} needs its node key ({NODE_KEY_HEADER}); "
                "an admin can remove it in the admin instead.",
                status.HTTP_403_FORBIDDEN,
            )
        try:
            services.deregister_node(hostname, self.node_key())
        except services.NodeNotFound as exc:
            return _error(str(exc), status.HTTP_404_NOT_FOUND)
        except services.NodeKeyRequired as exc:
            return _error(str(exc), status.HTTP_403_FORBIDDEN)
        return Response({"hostname": hostname, "deregistered": True})


class SelfView(AgentAPIView):
    serializer_class = NodeDetailSerializer

    @extend_schema(
        operation_id="self",
        summary="What the master thinks of the calling node",
        parameters=[NODE_KEY_REQUIRED],
        responses={
            200: NodeDetailSerializer,
            403: OpenApiResponse(ErrorSerializer, description="node key missing or wrong"),
        },
    )
    def get(self, request):
        node = services.node_for_key(self.node_key())
        if node is None:
            return _error(
                f"{NODE_KEY_HEADER} is missing or matches no node; register first "
                "(mac start agent) or ask an admin to reset the node's key.",
                status.HTTP_403_FORBIDDEN,
            )
        return Response(self.get_serializer(node).data)


@extend_schema_view(
    list=extend_schema(
        summary="List nodes (filter by status, GPU vendor, GPU health, maintenance, label)",
        responses={200: NodeSerializer(many=True), 400: BAD_REQUEST, 401: NOT_AUTHENTICATED},
    ),
    retrieve=extend_schema(
        summary="One node with its 20 most recent events",
        responses={
            200: NodeDetailSerializer,
            401: NOT_AUTHENTICATED,
            404: OpenApiResponse(ErrorSerializer, description="no node has that id"),
        },
    ),
)
class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """The inventory for people and scripts: a logged-in user or an API token."""

    queryset = Node.objects.all()
    # Token first so that an unauthenticated client gets 401 with WWW-Authenticate.
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    pagination_class = StrictLimitOffsetPagination
    filterset_class = NodeFilterSet
    filter_backends = [DjangoFilterBackend, StrictOrderingFilter]
    ordering_fields = [
        "hostname", "ip", "status", "last_seen", "registered_at", "gpu_count", "health_state",
        "health_since",
    ]  # fmt: skip
    ordering = ["hostname"]

    def get_serializer_class(self):
        if self.action == "gpus":
            return GpuHealthSerializer
        return NodeDetailSerializer if self.action == "retrieve" else NodeSerializer

    @extend_schema(
        summary="Each GPU of a node: its verdict, the suggested action and the evidence",
        filters=False,
        responses={
            200: GpuHealthSerializer(many=True),
            401: NOT_AUTHENTICATED,
            404: OpenApiResponse(ErrorSerializer, description="no node has that id"),
        },
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def gpus(self, request, pk=None):
        node = self.get_object()
        return Response(GpuHealthSerializer(node.gpus.all(), many=True).data)
