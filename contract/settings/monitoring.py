"""The settings of what the master watches and tells: the sweep, the metrics engines
(Prometheus, or scale-out's store, scrapers and rule evaluator), Alertmanager, the
notification channels made from the environment, and the GPU verdicts' history."""

from __future__ import annotations

import math

from contract.services import MASTER_ALERTMANAGER_PORT, MASTER_PROMETHEUS_PORT
from contract.settings import readers
from contract.settings.kinds import (
    Custom,
    Duration,
    FilePath,
    Flag,
    HostName,
    Integer,
    ListOf,
    Number,
    Port,
    Secret,
    Size,
    Text,
    Url,
)
from contract.settings.model import Applies, Derived, Group, Setting, SetWith, Side

MASTER, BOTH = Side.MASTER, Side.BOTH
PROCESS = Applies.PROCESS
# MAC_SCRAPE_SHARDS: 0 is one Prometheus; 1..MAX_SHARDS scrapers in scale-out mode.
MAX_SHARDS = 64


def _node_group_interval(values) -> str:
    """A node's alert changes only at a sweep's post, so a group interval under the probe
    interval sends nothing more, only sooner: the probe interval, at most 5 s."""
    return f"{max(1, min(5, math.ceil(values['MAC_PROBE_INTERVAL'])))}s"


SWEEP = Group(
    "The sweep",
    (
        Setting(
            "MAC_PROBE_INTERVAL",
            Number(0.5, 3600),
            30.0,
            "seconds between sweeps of the fleet",
            MASTER,
            see="docs/probing.md",
            readme=True,
        ),
        Setting(
            "MAC_PROBE_TIMEOUT",
            Number(0.1, 60),
            3.0,
            "seconds each probe may take (`mac probe` takes the same where it is set)",
            BOTH,
            see="docs/probing.md",
            readme=True,
        ),
        Setting(
            "MAC_PROBE_CONCURRENCY",
            Integer(1, None),
            1000,
            "probes in flight at once in one sweep",
            MASTER,
            see="docs/probing.md",
        ),
        Setting(
            "MAC_SWEEP_CHUNK_SIZE",
            Integer(1, None),
            10000,
            "a larger fleet is swept as chunk tasks of this many nodes, shared by the workers",
            MASTER,
            see="docs/probing.md#sharded-sweeps-several-workers-share-one-sweep",
            readme=True,
        ),
        Setting(
            "MAC_PROBE_QUEUE",
            Text(r"[A-Za-z0-9_.:-]+", "a queue name"),
            "celery",
            "the Celery queue of those chunk tasks, for probe workers near the nodes "
            "(`celery -A macweb worker -Q ...`); the master's own worker consumes it too",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_CLUSTER_NAME",
            Text(r"[A-Za-z0-9_.:-]+", "a label value of letters, digits, . _ : -"),
            "mac",
            "the `cluster_name` label on every target and alert",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_GPU_FAULT_REBOOTS",
            Integer(1, 100),
            1,
            "the same fault of the same GPU back after this many reboots escalates its action "
            "to `inspect_hardware`",
            MASTER,
            see="docs/gpu-health.md#escalation",
            readme=True,
        ),
        Setting(
            "MAC_GPU_FAULT_DAYS",
            Integer(1, 3650),
            30,
            "...counting the reboots of this many days",
            MASTER,
            see="docs/gpu-health.md#escalation",
            readme=True,
        ),
    ),
)

PROMETHEUS = Group(
    "Prometheus and the targets",
    (
        Setting(
            "MAC_SD_DIR",
            FilePath(),
            Derived(
                "$MAC_DATA_DIR/prometheus/targets",
                lambda values: values["MAC_DATA_DIR"] / "prometheus" / "targets",
            ),
            "where the sweep writes the file-SD targets",
            MASTER,
            applies=PROCESS,
            see="docs/probing.md",
            readme=True,
        ),
        Setting(
            "MAC_PROMETHEUS_URL",
            Url(),
            Derived(
                f"http://127.0.0.1:{MASTER_PROMETHEUS_PORT}",
                lambda values: f"http://127.0.0.1:{values['MAC_PROMETHEUS_PORT']}",
            ),
            "what the dashboard's charts and panels query; in scale-out mode `mac start "
            "master` points it at the store",
            MASTER,
            applies=PROCESS,
            readme=True,
        ),
        Setting(
            "MAC_TARGETS_URL",
            Url(),
            Derived("MAC_PROMETHEUS_URL", lambda values: values["MAC_PROMETHEUS_URL"]),
            "where `/api/v1/targets` (every target and its health) is read; in scale-out mode "
            "the merged view on 29090",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_SCRAPE_INTERVAL",
            Duration(),
            "15s",
            "Prometheus's scrape and rule evaluation interval",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_ALERT_FOR",
            Custom(readers.rule_durations, "RULE=DURATION,..."),
            None,
            "the `for:` of MAC's alert rules, e.g. `MacNodeOffline=3m`",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_RUNBOOK_BASE_URL",
            Url(),
            None,
            "prefixed to each rule's runbook link (docs/troubleshooting.md#...), where the docs "
            "are published",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_DASHBOARD_PROMETHEUS_TIMEOUT",
            Number(0.1, 120),
            5.0,
            "seconds a chart waits for Prometheus's answer",
            MASTER,
        ),
    ),
)

SCALE_OUT = Group(
    "Scale-out mode",
    (
        Setting(
            "MAC_SCRAPE_SHARDS",
            Integer(0, MAX_SHARDS),
            0,
            "`0`: one Prometheus. `N`: scale-out mode, N vmagent scrapers sharing the fleet by "
            "node, one victoria-metrics store that every chart, panel and `/health` reads, one "
            "vmalert evaluating the rules",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_METRICS_RETENTION",
            Duration(),
            "15d",
            "how long the scale-out store keeps samples (its `-retentionPeriod`; Prometheus"
            " keeps its own 15 d) and the master keeps Slurm job records",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_METRICS_STORE_PORT",
            Port(),
            29428,
            "the store's loopback port",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_SCRAPER_BASE_PORT",
            Port(),
            29430,
            "scraper K listens on this port + K",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_RULES_PORT",
            Port(),
            29480,
            "vmalert's loopback port",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_METRICS_STORE_URL",
            Url(),
            None,
            "a store on another machine (or the cluster version's vmselect/vminsert prefix): "
            "`mac` then runs no store of its own",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_METRICS_MIN_FREE_BYTES",
            Integer(0, None, "bytes"),
            1024**3,
            "`/health` is `degraded` (`metrics_store`) when the store's disk has less free",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_SCRAPER_BUFFER_BYTES",
            Size(),
            "2GiB",
            "the most each scraper keeps on disk while the store does not take samples "
            "(vmagent's `-remoteWrite.maxDiskUsagePerURL`)",
            MASTER,
            see="docs/scaling.md",
            readme=True,
        ),
        Setting(
            "MAC_SCRAPER_URLS",
            ListOf(Url()),
            [],
            "the scrapers, which `/health` watches",
            MASTER,
            set_with=SetWith.MAC,
        ),
        Setting(
            "MAC_RULES_URL",
            Url(),
            None,
            "vmalert, which `/health` watches in scale-out mode (`rules`)",
            MASTER,
            set_with=SetWith.MAC,
        ),
    ),
)

ALERTS = Group(
    "Alertmanager and notifications",
    (
        Setting(
            "MAC_ALERTMANAGER_URL",
            Url(credentials=False),
            Derived(
                f"http://127.0.0.1:{MASTER_ALERTMANAGER_PORT} (MAC's own)",
                lambda values: f"http://127.0.0.1:{values['MAC_ALERTMANAGER_PORT']}",
            ),
            "where alerts go, what the dashboard reads and where silences are made; a site's "
            "own Alertmanager instead",
            MASTER,
            see="docs/alerts.md#using-a-sites-own-alertmanager",
            readme=True,
        ),
        Setting(
            "MAC_ALERTMANAGER_MANAGED",
            Flag(),
            True,
            "MAC writes that Alertmanager's configuration from the notification channels; "
            "`mac start master` makes it 0 for a site's own",
            MASTER,
            see="docs/alerts.md#using-a-sites-own-alertmanager",
        ),
        Setting(
            "MAC_ALERTMANAGER_DIR",
            FilePath(),
            Derived(
                "$MAC_DATA_DIR/alertmanager", lambda values: values["MAC_DATA_DIR"] / "alertmanager"
            ),
            "where alertmanager.yml and the notification templates are written",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_ALERTMANAGER_TIMEOUT",
            Number(0.1, 120),
            3.0,
            "seconds each call to Alertmanager may take",
            MASTER,
        ),
        Setting(
            "MAC_AMTOOL_BIN",
            Text(looks_like="program"),
            "amtool",
            "the amtool that checks each channel's configuration",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_ALERT_POLL_INTERVAL",
            Number(0.5, 3600),
            10.0,
            "seconds between reads of the firing alerts (the dashboard's live list)",
            MASTER,
        ),
        Setting(
            "MAC_ALERT_GROUP_WAIT",
            Duration(zero=True),
            "30s",
            "Alertmanager's `group_wait`",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_ALERT_GROUP_INTERVAL",
            Duration(),
            "5m",
            "Alertmanager's `group_interval`",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_ALERT_REPEAT_INTERVAL",
            Duration(),
            "4h",
            "Alertmanager's `repeat_interval`",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_ALERT_NODE_GROUP_WAIT",
            Duration(zero=True),
            "3s",
            "`group_wait` of the node alerts the master posts itself (MacNodeOffline, grouped "
            "per node and incident): an incident shorter than this is never sent",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_ALERT_NODE_GROUP_INTERVAL",
            Duration(),
            Derived("the probe interval, at most 5s", _node_group_interval),
            "`group_interval` of those node alerts: how soon an incident's end is sent",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_ALERT_WEBHOOK_URL",
            Url(),
            None,
            "makes a webhook channel at `mac start master` (Alertmanager's JSON POSTed there)",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
        Setting(
            "MAC_ALERT_EMAIL_TO",
            Text(r"[^@\s,]+@[^@\s,]+", "an email address"),
            None,
            "makes an email channel at `mac start master`, sent through MAC_SMTP_*",
            MASTER,
            see="docs/alerts.md",
            readme=True,
        ),
    ),
)

MAIL = Group(
    "Mail (email channels, password resets)",
    (
        Setting(
            "MAC_SMTP_HOST",
            HostName(),
            None,
            "the mail server of the email channel and of the password-reset mail",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_SMTP_PORT", Port(), 587, "its port (465: TLS from the start)", MASTER, readme=True
        ),
        Setting("MAC_SMTP_USER", Text(), None, "its user", MASTER, readme=True),
        Setting("MAC_SMTP_PASSWORD", Secret(), None, "its password", MASTER, readme=True),
        Setting(
            "MAC_SMTP_FROM",
            Text(r"[^@\s]+@[^@\s]+|.*<[^@\s]+@[^@\s]+>", "an email address"),
            Derived("mac@localhost"),
            "the sender",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_SMTP_TLS", Flag(), True, "STARTTLS on ports other than 465", MASTER, readme=True
        ),
    ),
)

GROUPS = (SWEEP, PROMETHEUS, SCALE_OUT, ALERTS, MAIL)
