"""What the fleet page asks of the database: counts, filters and one page of rows.

Plain functions over the ORM so that the page, its JSON twin and the benchmark all
go through the same code. The page never loads the whole fleet: counts are one
aggregate query and rows come one page (PAGE_SIZE) at a time, so 10,000 nodes
cost the same as 100.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet
from django.http import QueryDict

from contract.diagnosis import describe
from contract.services import SYS_EXPORTER
from healthcheck.targets import SCRAPED_SERVICES, node_targets
from inventory.choices import AgentNetwork, Diagnosis, GpuVendor, NodeStatus, StatusReason
from inventory.models import Node

PAGE_SIZE = 100
MAX_SEARCH_LENGTH = 253  # the longest hostname there can be
MAINTENANCE_CHOICES = {"": None, "yes": True, "no": False}


class FilterError(ValueError):
    """A query parameter the fleet page cannot use; `field` names it for the 400 answer."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class FleetFilter:
    """The fleet page's search box, filters and page number, validated."""

    q: str = ""
    status: str = ""
    vendor: str = ""
    maintenance: bool | None = None
    page: int = 1

    @classmethod
    def from_query(cls, params: QueryDict | dict) -> FleetFilter:
        """Parse GET parameters; raise FilterError naming the first bad one."""
        q = (params.get("q") or "").strip()
        if len(q) > MAX_SEARCH_LENGTH:
            raise FilterError("q", f"search text is longer than {MAX_SEARCH_LENGTH} characters")
        status = (params.get("status") or "").strip().lower()
        if status and status not in NodeStatus.values:
            raise FilterError("status", f"must be one of {', '.join(NodeStatus.values)}")
        vendor = (params.get("vendor") or "").strip().lower()
        if vendor and vendor not in GpuVendor.values:
            raise FilterError("vendor", f"must be one of {', '.join(GpuVendor.values)}")
        maint_raw = (params.get("maintenance") or "").strip().lower()
        if maint_raw not in MAINTENANCE_CHOICES:
            raise FilterError("maintenance", "must be yes or no")
        page_raw = (params.get("page") or "1").strip()
        try:
            page = int(page_raw)
        except ValueError:
            raise FilterError("page", "must be a whole number from 1") from None
        if page < 1:
            raise FilterError("page", "must be a whole number from 1")
        return cls(q, status, vendor, MAINTENANCE_CHOICES[maint_raw], page)

    def as_query(self, **overrides: object) -> str:
        """The filter as a URL query string (for paging links), empty parts left out."""
        values = {
            "q": self.q,
            "status": self.status,
            "vendor": self.vendor,
            "maintenance": {True: "yes", False: "no", None: ""}[self.maintenance],
            "page": self.page if self.page != 1 else "",
        }
        values.update(overrides)
        query = QueryDict(mutable=True)
        for key, value in values.items():
            if value not in ("", None):
                query[key] = str(value)
        return query.urlencode()

    @property
    def active(self) -> bool:
        return bool(self.q or self.status or self.vendor or self.maintenance is not None)


def fleet_counts() -> dict:
    """Every count the page's tiles show, in one aggregate query."""
    aggregates = {f"status_{value}": Count("pk", filter=Q(status=value)) for value in NodeStatus}
    aggregates |= {
        f"vendor_{value}": Count("pk", filter=Q(gpu_vendor=value)) for value in GpuVendor
    }
    aggregates["maintenance"] = Count("pk", filter=Q(maintenance=True))
    aggregates["total"] = Count("pk")
    row = Node.objects.aggregate(**aggregates)
    return {
        "total": row["total"],
        "maintenance": row["maintenance"],
        "status": {value: row[f"status_{value}"] for value in NodeStatus.values},
        "vendor": {value: row[f"vendor_{value}"] for value in GpuVendor.values},
    }


def filter_nodes(flt: FleetFilter) -> QuerySet[Node]:
    """Nodes matching the filter, ordered by hostname (the model's ordering)."""
    nodes = Node.objects.all()
    if flt.q:
        nodes = nodes.filter(Q(hostname__icontains=flt.q) | Q(ip__startswith=flt.q))
    if flt.status:
        nodes = nodes.filter(status=flt.status)
    if flt.vendor:
        nodes = nodes.filter(gpu_vendor=flt.vendor)
    if flt.maintenance is not None:
        nodes = nodes.filter(maintenance=flt.maintenance)
    return nodes


def fleet_page(flt: FleetFilter, per_page: int = PAGE_SIZE) -> Page:
    """One page of matching nodes; a page past the end gives the last page."""
    paginator = Paginator(filter_nodes(flt), per_page)
    return paginator.get_page(flt.page)


def describe_diagnosis(code: str) -> dict:
    """{"code", "text", "fix"} for a Diagnosis value; text and fix empty for none."""
    if not code:
        return {"code": "", "text": "", "fix": ""}
    text, fix = describe(code)
    return {"code": code, "text": text, "fix": fix}


def vocabulary() -> dict:
    """Words for every code the page shows, sent once so live pushes can carry only codes."""
    return {
        "status": dict(NodeStatus.choices),
        "reason": dict(StatusReason.choices),
        "vendor": dict(GpuVendor.choices),
        "network": dict(AgentNetwork.choices),
        "diagnosis": {code: describe_diagnosis(code) for code in Diagnosis.values if code},
    }


def node_row(node: Node) -> dict:
    """Node.summary() plus the words for its codes: one row of the fleet JSON."""
    row = node.summary()
    row["status_text"] = node.get_status_display()
    row["status_reason_text"] = node.get_status_reason_display() if node.status_reason else ""
    row["diagnosis_info"] = describe_diagnosis(node.diagnosis)
    row["agent_network_text"] = node.get_agent_network_display()
    return row


def prometheus_targets(node: Node) -> dict[str, bool]:
    """{service: in its targets file now} for each job that could list this node.

    That is sys-exporter and every other scraped service the node reported; the rule
    (sys-exporter while Online, the others while their own probe answers) is
    healthcheck.targets', so the page says what the files say.
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
