"""What the fleet page asks of the database: counts, filters and one page of rows.

Besides the API's filters the page takes `alert=NAME`: the nodes with that alert firing
now, as Alertmanager says (the alerts panel links each group to it).

Plain functions over the ORM so that the page, its JSON twin and the benchmark all
go through the same code; the filters are the API's (inventory.filtersets). The page
never loads the whole fleet: counts are one aggregate query and rows come one page
(PAGE_SIZE) at a time, so 10,000 nodes cost the same as 100.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q
from django.http import QueryDict

from alerting import bulkheads
from alerting.client import AlertmanagerUnavailable
from alerting.queries import nodes_with_alert
from contract.diagnosis import describe
from contract.outcomes import DIAGNOSIS_LABELS
from contract.services import SYS_EXPORTER
from contract.verdicts import (
    ACTION_FIXES,
    OPERATOR_ACTIONS,
    Evidence,
    names_gpus,
    node_fix,
    reset_command,
)
from inventory.choices import (
    AgentNetwork,
    Diagnosis,
    GpuVendor,
    HealthAction,
    HealthState,
    NodeStatus,
    SlurmHold,
    StatusReason,
)
from inventory.filtersets import NodeFilterSet
from inventory.models import GpuHealth, Node
from scraping.targets import SCRAPED_SERVICES, node_targets

PAGE_SIZE = 100
# `?alert=NAME` (the alerts panel's "show these nodes"): a Prometheus alert name.
_ALERTNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
# Names the page used before it took the API's (inventory.filtersets): old bookmarks
# are sent on to the same filter under today's names.
LEGACY_NAMES = {"q": "search", "vendor": "gpu_vendor"}
LEGACY_VALUES = {"maintenance": {"yes": "true", "no": "false"}}


def legacy_query(params: QueryDict) -> QueryDict | None:
    """`params` with the page's old names and values in today's; None when there are none."""
    if not any(name in params for name in LEGACY_NAMES) and not any(
        value in LEGACY_VALUES[name] for name in LEGACY_VALUES for value in params.getlist(name)
    ):
        return None
    query = QueryDict(mutable=True)
    for name, values in params.lists():
        name = LEGACY_NAMES.get(name, name)
        renamed = LEGACY_VALUES.get(name, {})
        for value in values:
            query.appendlist(name, renamed.get(value, value))
    return query


class FleetQuery:
    """The fleet page's filters, the API's NodeFilterSet, and its page number, validated.

    An empty value is the form's "any" (a select left at its first option) and is left
    out. When a parameter is bad, `errors` names it and no filter is applied.
    """

    def __init__(self, params: QueryDict) -> None:
        data = QueryDict(mutable=True)
        for name in NodeFilterSet.base_filters:
            values = [value for value in params.getlist(name) if value.strip()]
            if values:
                data.setlist(name, values)
        filterset = NodeFilterSet(data, queryset=Node.objects.all())
        self.errors: dict[str, list[str]] = {
            name: list(messages) for name, messages in filterset.errors.items()
        }
        page = (params.get("page") or "1").strip()
        # Bounded before int(), which refuses more than 4,300 digits; past the last page
        # the paginator shows the last one.
        if not (page.isascii() and page.isdigit() and len(page) <= 9 and int(page) >= 1):
            self.errors["page"] = ["Use a whole number from 1."]
        alert = (params.get("alert") or "").strip()
        alert_ids: list[int] | None = None
        if alert:
            alert_ids = self._alerting_nodes(alert)
            data["alert"] = alert
        if self.errors:
            data, filterset, page = QueryDict(mutable=True), NodeFilterSet(), "1"
            alert_ids = None
        self.data = data
        self.filterset = filterset
        self.alert_ids = alert_ids
        self.page = int(page)

    def _alerting_nodes(self, alert: str) -> list[int] | None:
        """`alert=NAME`: the nodes with that alert firing now, from Alertmanager."""
        if not _ALERTNAME.fullmatch(alert):
            self.errors["alert"] = ["Use an alert name, e.g. alert=MacNodeOffline."]
            return None
        try:
            # Inside the bulkhead, as /alerts.json: a hung Alertmanager holds this thread.
            with bulkheads.ALERTMANAGER.slot():
                return nodes_with_alert(alert)
        except bulkheads.BulkheadFull as exc:
            self.errors["alert"] = [f"alerts unavailable: not asked: {exc}"]
        except AlertmanagerUnavailable as exc:
            self.errors["alert"] = [f"alerts unavailable: {exc}"]
        return None

    @property
    def active(self) -> bool:
        return bool(self.data)

    @property
    def error_text(self) -> str:
        """The errors in one line for the page, each after the parameter it is about."""
        return "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in self.errors.items())

    def selected(self) -> dict:
        """{parameter: list of values} of the applied filters, for the page's form."""
        return {name: self.data.getlist(name) for name in (*NodeFilterSet.base_filters, "alert")}

    def as_query(self, **overrides: object) -> str:
        """The filters as a URL query string (for paging links), page 1 left out."""
        query = self.data.copy()
        page = overrides.get("page", self.page)
        if page != 1:
            query["page"] = str(page)
        return query.urlencode()

    def page_of_nodes(self, per_page: int = PAGE_SIZE) -> Page:
        """One page of matching nodes; a page past the end gives the last page."""
        nodes = self.filterset.qs
        if self.alert_ids is not None:
            nodes = nodes.filter(pk__in=self.alert_ids)
        return Paginator(nodes, per_page).get_page(self.page)


def fleet_counts() -> dict:
    """Every count the page's tiles show, in one aggregate query."""
    aggregates = {f"status_{value}": Count("pk", filter=Q(status=value)) for value in NodeStatus}
    aggregates |= {
        f"vendor_{value}": Count("pk", filter=Q(gpu_vendor=value)) for value in GpuVendor
    }
    aggregates |= {
        f"health_{value}": Count("pk", filter=Q(health_state=value)) for value in HealthState
    }
    operator = [str(action) for action in OPERATOR_ACTIONS]
    aggregates["needs_action"] = Count("pk", filter=Q(health_action__in=operator))
    aggregates |= {
        f"drained_{value}": Count("pk", filter=Q(slurm_hold=value)) for value in SlurmHold if value
    }
    aggregates["maintenance"] = Count("pk", filter=Q(maintenance=True))
    aggregates["total"] = Count("pk")
    row = Node.objects.aggregate(**aggregates)
    return {
        "total": row["total"],
        "maintenance": row["maintenance"],
        "status": {value: row[f"status_{value}"] for value in NodeStatus.values},
        "vendor": {value: row[f"vendor_{value}"] for value in GpuVendor.values},
        "health": {value: row[f"health_{value}"] for value in HealthState.values},
        "needs_action": row["needs_action"],
        "drained": {value: row[f"drained_{value}"] for value in SlurmHold.values if value},
    }


def describe_diagnosis(code: str) -> dict:
    """{"code", "label", "text", "fix"} for a Diagnosis value: a few words for the fleet
    table's one line, the paragraph and the commands behind a click; empty for none."""
    if not code:
        return {"code": "", "label": "", "text": "", "fix": ""}
    text, fix = describe(code)
    # A code this release does not know (left by a downgrade or a hand edit) is shown as is.
    label = DIAGNOSIS_LABELS.get(code, code)  # StrEnum keys: the value finds them
    return {"code": code, "label": label, "text": text, "fix": fix}


def vocabulary() -> dict:
    """Words for every code the page shows, sent once so live pushes can carry only codes."""
    return {
        "status": dict(NodeStatus.choices),
        "reason": dict(StatusReason.choices),
        "vendor": dict(GpuVendor.choices),
        "network": dict(AgentNetwork.choices),
        "diagnosis": {code: describe_diagnosis(code) for code in Diagnosis.values if code},
        "health": dict(HealthState.choices),
        "action": dict(HealthAction.choices),
        "fixes": {action: ACTION_FIXES.get(action, "") for action in HealthAction.values},
        "operator_actions": sorted(str(action) for action in OPERATOR_ACTIONS),
        "slurm_hold": dict(SlurmHold.choices),
    }


def node_row(node: Node) -> dict:
    """Node.summary() plus the words for its codes: one row of the fleet JSON."""
    row = node.summary()
    row["status_text"] = node.get_status_display()
    row["status_reason_text"] = node.get_status_reason_display() if node.status_reason else ""
    row["diagnosis_info"] = describe_diagnosis(node.diagnosis)
    row["agent_network_text"] = node.get_agent_network_display()
    row["health_state_text"] = node.get_health_state_display()
    row["health_action_text"] = node.get_health_action_display()
    row["needs_action"] = node.health_action in OPERATOR_ACTIONS
    row["slurm_hold_text"] = node.get_slurm_hold_display() if node.slurm_hold else ""
    return row


def prometheus_targets(node: Node) -> dict[str, bool]:
    """{service: in its targets file now} for each job that could list this node.

    That is sys-exporter and every other scraped service the node reported; the rule
    (sys-exporter while Online, the others while their own probe answers) is
    scraping.targets', so the page says what the files say.
    """
    listed = set(
        node_targets(
            {
                "status": node.status,
                "exporters": node.exporters,
                "exporter_health": node.exporter_health,
            }
        )
    )
    candidates = [
        name
        for name in SCRAPED_SERVICES
        if name == SYS_EXPORTER.name or name in (node.exporters or {})
    ]
    return {name: name in listed for name in candidates}


def evidence_words(item: object) -> str:
    """One piece of a GPU's evidence in words. One this release cannot read (written by
    another release or by hand: an unknown state or action, a bad time, not an object) is
    shown as its text rather than failing the page."""
    try:
        return Evidence.from_dict(item).words(gpu=False)
    except (AttributeError, TypeError, ValueError, OverflowError, OSError):
        detail = item.get("detail") if isinstance(item, dict) else None
        return detail if isinstance(detail, str) and detail else str(item)


def gpu_rows(node: Node) -> list[dict]:
    """Each GPU's verdict for the node page: identity, state, action, the evidence in words."""
    rows = []
    for gpu in node.gpus.all():
        evidence = [evidence_words(item) for item in gpu.evidence or []]
        rows.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "serial": gpu.serial,
                "state": gpu.state,
                "state_text": gpu.get_state_display(),
                "action": gpu.action,
                "action_text": gpu.get_action_display(),
                # The repair a person runs on the node, ready to paste (gpu-health.md).
                "command": (
                    reset_command(str(gpu.index), gpu.uuid)
                    if gpu.action == HealthAction.RESET_GPU
                    else ""
                ),
                "evidence": evidence,
                "since": gpu.since.isoformat(),
            }
        )
    return rows


def health_fix(node: Node) -> str:
    """What a person does for the node's suggested action ("" when none), its commands
    naming the GPUs that need it (contract.verdicts.node_fix)."""
    row = {"id": node.pk, "health_action": node.health_action, "gpu_vendor": node.gpu_vendor}
    fixed = health_fixes([row])
    return fixed.get(node.pk, ACTION_FIXES.get(node.health_action, ""))  # StrEnum keys


def health_fixes(rows: Iterable[dict]) -> dict[int, str]:
    """{node id: the fix of its GPU verdict's action, naming the GPUs that need it} for
    the rows (Node.summary()s) whose fix names GPUs (reset_gpu): one query for them all.
    The vocabulary's fixes serve the others, so the live pushes carry only these."""
    wanted = {row["id"]: row for row in rows if names_gpus(row.get("health_action", ""))}
    if not wanted:
        return {}
    named: dict[int, list[tuple[str, str]]] = defaultdict(list)
    vendors: dict[int, str] = {}
    gpus = GpuHealth.objects.filter(node_id__in=list(wanted)).order_by("node_id", "index")
    found = gpus.values_list("node_id", "index", "uuid", "action", "vendor")
    for node_id, index, uuid, action, vendor in found:
        if vendor != GpuVendor.NONE:
            vendors[node_id] = vendor
        if action == wanted[node_id]["health_action"]:
            named[node_id].append((str(index), uuid))
    return {
        node_id: node_fix(row["health_action"], named[node_id], _vendor(vendors.get(node_id), row))
        for node_id, row in wanted.items()
    }


def _vendor(recorded: str | None, row: dict) -> str:
    """The GPUs' vendor for their fix's lines: as the GPUs' own rows recorded it (every GPU
    of a node is the same vendor's), else the node's (whose discovery may say "none"
    while its exporter judged GPUs); "" where neither says: both vendors' lines."""
    vendor = recorded or row.get("gpu_vendor", "")
    return vendor if vendor in (GpuVendor.NVIDIA, GpuVendor.AMD) else ""


def with_health_fixes(rows: list[dict]) -> list[dict]:
    """The rows, those whose fix names GPUs with it as ``health_fix`` (the node page's
    Fix box follows it: pushes and the resynchronising /fleet.json)."""
    fixes = health_fixes(rows)
    return [{**row, "health_fix": fixes[row["id"]]} if row["id"] in fixes else row for row in rows]
