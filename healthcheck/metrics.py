"""The master's own /metrics: the inventory as Prometheus sees it, read fresh each scrape.

A node dropped from the file-SD targets vanishes from Prometheus (its series go
stale, so `up == 0` never fires). These series stay, one per registered node,
so alert rules can fire on Offline nodes:

    mac_node_up{node, hostname, cluster_name, gpu_vendor, maintenance, down_since}
                                    1 Online, 0 Offline, no series while Unknown (not
                                    probed yet: not down, and the backstop must not
                                    page for it); down_since (UTC, to the second) is
                                    when an Offline node left Online, or its
                                    maintenance changed since; absent on Online
    mac_node_status{node, hostname, cluster_name, status, reason, diagnosis, maintenance}  1
    mac_node_exporter_up{node, hostname, service}   1 when that exporter answered its
                                                    last probe, 0 when it did not
    mac_nodes{status}                                          nodes per status
    mac_nodes_health{state}         nodes per GPU verdict (healthy, degraded, unhealthy;
                                    inventory.services.health); every state, 0 included
    mac_nodes_needing_action{action}   nodes whose verdict asks an operator to act, per
                                    action (reset_gpu, reboot, inspect_hardware)
    mac_sweep_duration_seconds, mac_sweep_probe_duration_seconds
    mac_sweep_last_timestamp_seconds, mac_sweeps_total, mac_probes_total{outcome}
    mac_sweep_targets_written       1 when the last sweep could write the targets files
    mac_probe_interval_seconds      MAC_PROBE_INTERVAL, so rules can tell a stalled sweep
    mac_alert_posts_total{outcome}  the master's posts of its node alerts to Alertmanager
                                    (alerting.nodealerts), "ok" or "failed"
    mac_slurm_*                     the drain in Slurm, while MAC_SLURM_DRAIN is not off
                                    (scheduler.metrics)
    mac_gpu_job_info{Hostname, gpu, UUID, job_id, user, partition}   1 per GPU a Slurm job
                                    holds now (scheduler.jobread, docs/jobs.md)

Labels hold codes only (status, reason and diagnosis are choices' values, node is the
id): their number stays bounded. down_since is the one that moves: a new value, so a new
mac_node_up series, per incident of a node. The words and fixes reach notifications in
the master's own node alerts (alerting.nodealerts), not through these series; the
backstop rule MacNodeOffline only needs mac_node_up, whose down_since gives each
incident its own alert, as in the master's post (alerting.nodealerts says why).
cluster_name (MAC_CLUSTER_NAME) is the label every target carries too, so one silence
matcher fits every alert of a node.

Each exporter stays in its targets file while its own probe answers, even on an
Offline node (under ip_forward=0 nic-exporter is still scraped), so mac_node_up says
whether the node is Online and mac_node_exporter_up says which exporters answer.

A custom collector yields fresh metric families per scrape (no global registry
filled at import time); the view builds a private CollectorRegistry around it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator

from django.conf import settings
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alerting.nodealerts import down_since, post_stats
from contract.verdicts import OPERATOR_ACTIONS
from healthcheck.state import get_redis, last_sweep, probes_total, sweep_count
from inventory.choices import HealthState, NodeStatus
from inventory.models import Node
from scheduler.metrics import drain_metrics, job_metrics

log = logging.getLogger(__name__)


class InventoryCollector(Collector):
    """Per-node status from the database, sweep figures from Redis."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "mac_node_up",
            "1 when the node's sys-exporter answered the last sweep (Online), else 0.",
            labels=["node", "hostname", "cluster_name", "gpu_vendor", "maintenance", "down_since"],
        )
        status = GaugeMetricFamily(
            "mac_node_status",
            "Always 1; the labels carry the node's status, reason and diagnosis.",
            labels=[
                "node", "hostname", "cluster_name", "status", "reason", "diagnosis", "maintenance",
            ],
        )  # fmt: skip
        exporter_up = GaugeMetricFamily(
            "mac_node_exporter_up",
            "1 when the exporter answered its liveness probe in the last sweep, else 0; "
            "an exporter that answers stays a Prometheus target even on an Offline node.",
            labels=["node", "hostname", "service"],
        )
        cluster = settings.CLUSTER_NAME
        counts: Counter[str] = Counter({choice: 0 for choice in NodeStatus.values})
        verdicts: Counter[str] = Counter({choice: 0 for choice in HealthState.values})
        actions: Counter[str] = Counter({str(action): 0 for action in OPERATOR_ACTIONS})
        rows = Node.objects.order_by("id").values_list(
            "id",
            "hostname",
            "gpu_vendor",
            "maintenance",
            "status",
            "status_reason",
            "diagnosis",
            "exporter_health",
            "health_state",
            "health_action",
            "status_changed_at",
            "maintenance_changed_at",
        )
        for row in rows.iterator(chunk_size=5000):
            node_id, hostname, vendor, maintenance, state, reason, diagnosis, health = row[:8]
            verdicts[row[8]] += 1
            if row[9] in actions:
                actions[row[9]] += 1
            flag = "true" if maintenance else "false"
            node = str(node_id)
            online = state == NodeStatus.ONLINE
            # One series while Online; one per incident while Offline (the backstop's
            # identity); none before the first probe, which may lag a large sweep.
            if state != NodeStatus.UNKNOWN:
                since = "" if online else down_since(row[10], row[11])
                up.add_metric([node, hostname, cluster, vendor, flag, since], float(online))
            status.add_metric([node, hostname, cluster, state, reason, diagnosis, flag], 1.0)
            for service, answered in sorted((health or {}).items()):
                exporter_up.add_metric([node, hostname, service], 1.0 if answered else 0.0)
            counts[state] += 1
        yield up
        yield status
        yield exporter_up
        nodes = GaugeMetricFamily("mac_nodes", "Registered nodes by status.", labels=["status"])
        for state, count in sorted(counts.items()):
            nodes.add_metric([state], count)
        yield nodes
        health_counts = GaugeMetricFamily(
            "mac_nodes_health", "Registered nodes by GPU verdict.", labels=["state"]
        )
        for state, count in sorted(verdicts.items()):
            health_counts.add_metric([state], count)
        yield health_counts
        needing = GaugeMetricFamily(
            "mac_nodes_needing_action",
            "Nodes whose GPU verdict asks an operator to act, by action.",
            labels=["action"],
        )
        for action, count in sorted(actions.items()):
            needing.add_metric([action], count)
        yield needing
        yield from self._post_metrics()
        yield GaugeMetricFamily(
            "mac_probe_interval_seconds",
            "Seconds between fleet sweeps (MAC_PROBE_INTERVAL).",
            value=settings.PROBE_INTERVAL,
        )
        yield from self._sweep_metrics()
        try:
            yield from drain_metrics()
        except Exception:
            log.warning("drain statistics unavailable for /metrics", exc_info=True)
        yield from job_metrics()

    def _post_metrics(self) -> Iterator[Metric]:
        try:
            stats = post_stats()
        except Exception:
            log.warning("node alert post statistics unavailable for /metrics", exc_info=True)
            return
        posts = CounterMetricFamily(
            "mac_alert_posts",
            "Posts of the master's node alerts to Alertmanager, by outcome.",
            labels=["outcome"],
        )
        posts.add_metric(["ok"], stats["ok"])
        posts.add_metric(["failed"], stats["failed"])
        yield posts

    def _sweep_metrics(self) -> Iterator[Metric]:
        try:
            client = get_redis()
            last = last_sweep(client)
            probes = probes_total(client)
            sweeps = sweep_count(client)
        except Exception:
            # Node series above still come out; Redis trouble shows on /health.
            log.warning("sweep statistics unavailable for /metrics", exc_info=True)
            return
        total = CounterMetricFamily(
            "mac_probes", "Probes sent by fleet sweeps, by outcome.", labels=["outcome"]
        )
        for outcome, count in sorted(probes.items()):
            total.add_metric([outcome], count)
        yield total
        yield CounterMetricFamily("mac_sweeps", "Fleet sweeps completed.", value=sweeps)
        if last:
            yield GaugeMetricFamily(
                "mac_sweep_duration_seconds", "Duration of the last sweep.", value=last["duration"]
            )
            yield GaugeMetricFamily(
                "mac_sweep_probe_duration_seconds",
                "Time the last sweep spent probing.",
                value=last["probe_duration"],
            )
            yield GaugeMetricFamily(
                "mac_sweep_last_timestamp_seconds",
                "Unix time the last sweep finished.",
                value=last["finished_at"],
            )
            yield GaugeMetricFamily(
                "mac_sweep_targets_written",
                "1 when the last sweep could write Prometheus' targets files, 0 when it "
                "could not (full or read-only disk; /health says why).",
                value=0.0 if last.get("targets_error") else 1.0,
            )


def master_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(InventoryCollector())
    return registry
