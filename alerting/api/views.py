"""The notification channels API (/api/v1/alert-channels/): Django's model permissions on
NotificationChannel (view, add, change, delete; the admin grants them), thin over services."""

from __future__ import annotations

from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers, status, viewsets
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.permissions import DjangoModelPermissions
from rest_framework.response import Response

from alerting import services
from alerting.api.serializers import NotificationChannelSerializer
from alerting.models import NotificationChannel

_SENT = inline_serializer("TestNotificationSent", {"detail": serializers.CharField()})
_DETAIL = inline_serializer("AlertChannelError", {"detail": serializers.CharField()})
# What every operation may answer besides its success: who may call it, which channel.
DENIED = {
    401: OpenApiResponse(_DETAIL, description="no session and no valid API token"),
    403: OpenApiResponse(
        _DETAIL, description="the user lacks the permission (alerting.<action>_notificationchannel)"
    ),
}
NOT_FOUND = {404: OpenApiResponse(_DETAIL, description="no channel has that id")}
BAD_REQUEST = {
    400: OpenApiResponse(
        description='{"<field>": ["message"]}: the field Alertmanager would refuse'
    )
}


class ChannelPermissions(DjangoModelPermissions):
    """Model permissions, reading included (a channel's URL host and filters are the
    site's business); sending a test notification needs the change permission."""

    perms_map = {
        **DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
    }

    def has_permission(self, request, view) -> bool:
        if getattr(view, "action", None) == "test":
            user = request.user
            return bool(user and user.is_authenticated) and user.has_perm(
                "alerting.change_notificationchannel"
            )
        return super().has_permission(request, view)


# A change saved but not yet written into alertmanager.yml (a full disk): the channel
# stays, marked pending, and the poll writes it once it can.
PENDING = {
    503: OpenApiResponse(_DETAIL, description="saved, but alertmanager.yml could not be written")
}


class ChannelPending(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "channel_pending"


def _actor(request) -> str:
    return f"api:{request.user.get_username()}"


def _said(applied: services.Applied, channel: NotificationChannel | None = None) -> None:
    """A change whose files could not be written answers 503 with why (the change stays)."""
    if applied.write_error:
        what = f"channel {channel.name!r} (id {channel.pk}) saved" if channel else "saved"
        raise ChannelPending(f"{what}, but not in use yet: {applied.write_error}")


@extend_schema_view(
    list=extend_schema(
        responses={200: NotificationChannelSerializer(many=True), **BAD_REQUEST, **DENIED}
    ),
    create=extend_schema(
        responses={201: NotificationChannelSerializer, **BAD_REQUEST, **DENIED, **PENDING}
    ),
    retrieve=extend_schema(responses={200: NotificationChannelSerializer, **DENIED, **NOT_FOUND}),
    update=extend_schema(
        responses={
            200: NotificationChannelSerializer,
            **BAD_REQUEST,
            **DENIED,
            **NOT_FOUND,
            **PENDING,
        }
    ),
    partial_update=extend_schema(
        responses={
            200: NotificationChannelSerializer,
            **BAD_REQUEST,
            **DENIED,
            **NOT_FOUND,
            **PENDING,
        }
    ),
    destroy=extend_schema(responses={204: None, **DENIED, **NOT_FOUND, **PENDING}),
)
class NotificationChannelViewSet(viewsets.ModelViewSet):
    """Where alerts go. Every change rewrites alertmanager.yml and reloads Alertmanager;
    `config_error` says why a channel is left out (the others keep working)."""

    queryset = NotificationChannel.objects.all()
    serializer_class = NotificationChannelSerializer
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [ChannelPermissions]
    filterset_fields = ["kind", "enabled"]

    def perform_create(self, serializer) -> None:
        channel = NotificationChannel(**serializer.validated_data)
        applied = services.save_channel(channel, actor=_actor(self.request))
        serializer.instance = channel
        _said(applied, channel)

    def perform_update(self, serializer) -> None:
        channel = serializer.instance
        for name, value in serializer.validated_data.items():
            setattr(channel, name, value)
        _said(services.save_channel(channel, actor=_actor(self.request)), channel)

    def perform_destroy(self, instance) -> None:
        _said(services.delete_channels([instance]))

    @extend_schema(
        request=None,
        responses={
            202: _SENT,
            409: OpenApiResponse(_SENT, description="disabled, left out, or Alertmanager down"),
            **DENIED,
            **NOT_FOUND,
        },
        summary="Send a test notification to this channel (through Alertmanager)",
    )
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        channel = self.get_object()
        try:
            sent = services.send_test_notification(channel, actor=_actor(request))
        except services.ChannelError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response({"detail": sent}, status=status.HTTP_202_ACCEPTED)
