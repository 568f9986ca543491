"""What community dashboards read, one YAML file per dashboard or default field set.

Each file is written from the dashboard (names and label matchers of its queries,
its template variables), never a copy of its JSON:

    title: ...
    job: dcgm-exporter            # the MAC exporter whose series the dashboard reads
    variables:                    # optional: $name -> label_values(metric, label)
      instance: {metric: DCGM_FI_DEV_GPU_TEMP, label: instance}
    labels: [gpu, UUID]           # optional: labels every listed series must carry
    metrics:
      DCGM_FI_DEV_GPU_TEMP: {matchers: ['instance=~"$instance"'], type: gauge}

``matchers`` and ``type`` are optional. More exporters' lists (node_exporter, AMD,
RDMA) are more files here; the Prometheus test picks every file up. Two optional
keys more:

    host_dependent: true          # the exporter reads the test machine itself: only
                                  # the names it exposes there must return series
    unsupported:                  # read by the dashboard, never supplied: why
      gpu_prof_sm_active: rocprofiler counters
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TYPES = {"counter", "gauge", "histogram", "summary", "unknown"}
VARIABLE = re.compile(r"\$(\w+)")


@dataclass(frozen=True)
class Variable:
    metric: str
    label: str


@dataclass(frozen=True)
class QueryList:
    """One dashboard's (or default set's) metric names, matchers and expected types."""

    path: Path
    title: str
    job: str
    metrics: dict[str, list[str]]  # name -> label matchers, e.g. 'gpu=~"$gpu"'
    types: dict[str, str] = field(default_factory=dict)
    variables: dict[str, Variable] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    host_dependent: bool = False
    unsupported: dict[str, str] = field(default_factory=dict)

    def selector(self, name: str, values: dict[str, list[str]]) -> str:
        """``name{matchers}`` with each $variable replaced by a regex of all its values.

        As Grafana does for a multi-value variable set to All: the values regex-escaped,
        then escaped again for PromQL's double-quoted string. In an equality matcher
        (``instance="$node"``, a single-value variable) it is the first value as is.
        """

        def regex(match: re.Match) -> str:
            escaped = (re.escape(v).replace("\\", "\\\\") for v in values[match.group(1)])
            return "|".join(escaped)

        def first(match: re.Match) -> str:
            return values[match.group(1)][0]

        matchers = [
            VARIABLE.sub(regex if re.search(r"[=!]~", matcher) else first, matcher)
            for matcher in self.metrics[name]
        ]
        return f"{name}{{{', '.join(matchers)}}}" if matchers else name


def _fail(path: Path, where: str, why: str) -> ValueError:
    return ValueError(f"{path.name}: {where}: {why}")


def load(path: Path) -> QueryList:
    """Read and check one list; errors name the file and the field at fault."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise _fail(path, "top level", "expected a mapping")
    for key in ("title", "job", "metrics"):
        if not data.get(key):
            raise _fail(path, key, "missing")
    variables = {}
    for name, spec in (data.get("variables") or {}).items():
        if not isinstance(spec, dict) or not spec.get("metric") or not spec.get("label"):
            raise _fail(path, f"variables.{name}", "needs metric and label")
        variables[name] = Variable(spec["metric"], spec["label"])
    metrics, types = {}, {}
    for name, spec in data["metrics"].items():
        spec = spec or {}
        matchers = spec.get("matchers") or []
        for matcher in matchers:
            for used in VARIABLE.findall(matcher):
                if used not in variables:
                    raise _fail(path, f"metrics.{name}.matchers", f"${used} is not a variable")
        if "type" in spec and spec["type"] not in TYPES:
            raise _fail(path, f"metrics.{name}.type", f"{spec['type']!r} not in {sorted(TYPES)}")
        metrics[name] = list(matchers)
        if "type" in spec:
            types[name] = spec["type"]
    return QueryList(
        path=path,
        title=data["title"],
        job=data["job"],
        metrics=metrics,
        types=types,
        variables=variables,
        labels=list(data.get("labels") or []),
        host_dependent=bool(data.get("host_dependent")),
        unsupported={str(k): str(v) for k, v in (data.get("unsupported") or {}).items()},
    )


def all_lists() -> list[QueryList]:
    return [load(path) for path in sorted(HERE.glob("*.yml"))]
