"""Django admin for the inventory: staff see, filter, edit and act on nodes.

Every change made here goes through inventory.services so it leaves the same events
(with the admin's name as actor) as changes made through the API, and reaches open
dashboards the same way: the services push on commit, the admin never does.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from contract.master_api import REPORTED_FIELDS
from inventory import services
from inventory.addresses import AddressRefused, check_node_address
from inventory.models import GpuFault, GpuHealth, Node, NodeEvent
from inventory.validators import (
    MAX_GPUS,
    check_exporters,
    check_labels,
    check_nics,
    normalize_hostname,
)

INLINE_EVENTS = 50
# Fields the prober owns; an admin editing them would only be overwritten next sweep.
PROBE_FIELDS = (
    "status",
    "status_reason",
    "status_detail",
    "diagnosis",
    "exporter_health",
    "last_seen",
    "status_changed_at",
    "registered_at",
    "updated_at",
)
# The GPU verdict (inventory.services.health): the sweep owns it too.
HEALTH_FIELDS = (
    "health_state",
    "health_action",
    "health_evidence",
    "health_since",
    "health_streak",
    "boot_id",
)
OPERATOR_FIELDS = ("hostname", "ip", "maintenance", "labels")
# What the agent reports (the contract's list), less what the operator edits here too.
AGENT_FIELDS = tuple(name for name in REPORTED_FIELDS if name not in OPERATOR_FIELDS)


class NodeAdminForm(forms.ModelForm):
    """The node form, with the API's rules for what the agent reports.

    The JSON fields keep the shape the pages and the sweep read: an emptied field is
    the empty object or list, not JSON null.
    """

    class Meta:
        model = Node
        fields = (*OPERATOR_FIELDS, *AGENT_FIELDS)

    def clean_hostname(self) -> str:
        try:
            return normalize_hostname(self.cleaned_data["hostname"])
        except ValueError as exc:
            raise forms.ValidationError(f"Hostname {exc}") from None

    def clean_ip(self) -> str:
        try:
            return check_node_address(self.cleaned_data["ip"])
        except AddressRefused as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_gpu_count(self) -> int:
        count = self.cleaned_data["gpu_count"]
        if count is not None and count > MAX_GPUS:
            raise forms.ValidationError(f"At most {MAX_GPUS} GPUs, as registration takes.")
        return count

    def clean_nics(self) -> list:
        return _json_field(self.cleaned_data.get("nics"), check_nics, "NICs", [])

    def clean_exporters(self) -> dict:
        return _json_field(self.cleaned_data.get("exporters"), check_exporters, "Exporters", {})

    def clean_labels(self) -> dict:
        return _json_field(self.cleaned_data.get("labels"), check_labels, "Labels", {})


def _json_field(value, check, name: str, empty):
    if value is None:
        return empty
    try:
        return check(value)
    except ValueError as exc:
        raise forms.ValidationError(f"{name}: {exc}") from None


class RecentEventsFormSet(forms.BaseInlineFormSet):
    """Only the most recent events: a flapping node collects thousands."""

    def get_queryset(self):
        if not hasattr(self, "_recent"):
            self._recent = super().get_queryset()[:INLINE_EVENTS]
        return self._recent


class NodeEventInline(admin.TabularInline):
    """The node's latest events (all of them: Inventory > Node events)."""

    model = NodeEvent
    formset = RecentEventsFormSet
    verbose_name_plural = "recent events"
    fields = ("created_at", "kind", "message", "actor")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False
    ordering = ("-created_at", "-id")

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


def _actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeAdminForm
    list_display = (
        "hostname",
        "status",
        "ip",
        "gpu_vendor",
        "gpu_count",
        "health_state",
        "health_action",
        "last_seen",
        "maintenance",
    )
    list_filter = ("status", "gpu_vendor", "health_state", "health_action", "maintenance",
                   "diagnosis")  # fmt: skip
    search_fields = ("hostname", "ip", "machine_id")
    readonly_fields = (*PROBE_FIELDS, *HEALTH_FIELDS)
    inlines = (NodeEventInline,)
    actions = ("deregister", "maintenance_on", "maintenance_off", "reset_node_key")
    list_per_page = 100
    fieldsets = (
        (None, {"fields": OPERATOR_FIELDS}),
        ("Status (set by the probe)", {"fields": PROBE_FIELDS}),
        ("GPU verdict (set by the probe)", {"fields": HEALTH_FIELDS}),
        ("Reported by the agent", {"fields": AGENT_FIELDS}),
    )

    def save_model(self, request: HttpRequest, obj: Node, form, change: bool) -> None:
        actor = _actor(request)
        if change:
            changes = {
                name: (form.initial.get(name), form.cleaned_data.get(name))
                for name in form.changed_data
            }
            services.edit_node_by_admin(obj, changes, actor=actor)
        else:
            services.add_node_by_admin(obj, actor=actor)

    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        services.remove_node(obj, actor=_actor(request), message="deleted in the admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        services.remove_nodes(queryset, actor=_actor(request), message="deleted in the admin")

    @admin.action(description="Deregister selected nodes")
    def deregister(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = services.remove_nodes(
            queryset, actor=_actor(request), message="deregistered by an admin"
        )
        self.message_user(request, f"Deregistered {count} node(s).", messages.SUCCESS)

    def _set_maintenance(self, request: HttpRequest, queryset: QuerySet, on: bool) -> None:
        deferred: list[str] = []
        changed = services.set_maintenance_of(
            queryset, on, actor=_actor(request), deferred=deferred
        )
        state = "on" if on else "off"
        self.message_user(request, f"Maintenance {state} for {len(changed)} node(s).")
        for words in deferred:
            self.message_user(request, words[:1].upper() + words[1:] + ".", messages.WARNING)

    @admin.action(description="Maintenance on")
    def maintenance_on(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_maintenance(request, queryset, True)

    @admin.action(description="Maintenance off")
    def maintenance_off(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_maintenance(request, queryset, False)

    @admin.action(description="Reset node key (the next registration gets a new one)")
    def reset_node_key(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = services.reset_node_keys(queryset, actor=_actor(request))
        self.message_user(request, f"Reset the key of {count} node(s).", messages.SUCCESS)


@admin.register(NodeEvent)
class NodeEventAdmin(admin.ModelAdmin):
    """The event history, read-only: events are facts, kept after a node is gone."""

    list_display = ("created_at", "hostname", "kind", "message", "actor")
    list_filter = ("kind",)
    search_fields = ("hostname", "message", "actor")
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """What the sweep writes: to look at, never to edit."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(GpuHealth)
class GpuHealthAdmin(ReadOnlyAdmin):
    """Each GPU's verdict as the last sweep read it (docs/gpu-health.md)."""

    list_display = ("node", "index", "state", "action", "uuid", "serial", "since")
    list_filter = ("state", "action", "vendor")
    search_fields = ("node__hostname", "uuid", "serial")
    list_select_related = ("node",)


@admin.register(GpuFault)
class GpuFaultAdmin(ReadOnlyAdmin):
    """The faults a reset or a reboot should cure, per GPU and boot: what escalation counts.
    Deleting a GPU's rows (after it was replaced, say) forgets its history."""

    list_display = ("gpu", "fault", "hostname", "gpu_index", "boot_id", "first_seen", "last_seen")
    list_filter = ("fault",)
    search_fields = ("gpu", "hostname", "fault")

    def delete_model(self, request: HttpRequest, obj: GpuFault) -> None:
        self.delete_queryset(request, GpuFault.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        # As the API's forget: an event per node, which its next sweep judges afresh.
        services.forget_fault_rows(queryset, actor=f"admin:{request.user.get_username()}")
