"""Settings of the MAC master, read entirely from the environment.

Defaults give the embedded set-up (SQLite in MAC_DATA_DIR, Redis on localhost,
Prometheus on 29090); every value can be overridden, and a bad one stops
start-up with a message that names the variable.

Loading the settings creates nothing: `manage.py prepare_master` (run first by
`mac start master` and the master's container) makes the data and static folders
and the secret key file, and a system check (macweb.checks) says to run it when
they are missing.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

from contract.settings.kinds import duration_seconds
from macweb.envconf import env_or_file_secret, file_value, setting, text
from macweb.hosts import master_hosts

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = setting("MAC_DATA_DIR")

# One key for every process of the master (API, worker, beat): from the environment,
# else the file prepare_master wrote. Never made up here: a key per process would
# break sessions and signed values between them. Empty means "not prepared", which
# the macweb.E001 check reports.
SECRET_KEY_FILE = DATA_DIR / "secret_key"
SECRET_KEY, SECRET_KEY_SOURCE = env_or_file_secret(
    ("SECRET_KEY", "MAC_SECRET_KEY"), SECRET_KEY_FILE
)
DEBUG = setting("MAC_DEBUG")
# ALLOWED_HOSTS: the master's own names and addresses (below, after the login flow).
CSRF_TRUSTED_ORIGINS = setting("MAC_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "macweb",
    "inventory",
    "alerting",
    "scheduler",
    "healthcheck",
    "scraping",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside the session and CSRF middleware: sees the cookies they set.
    "macweb.cookies.SecureCookiesOverHttps",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a locked-out login into macweb.login_limits' 429.
    "axes.middleware.AxesMiddleware",
    # A database outage is a quick 503 naming it, not a 500 (its process_exception runs first).
    "macweb.db_outage.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "macweb.urls"
WSGI_APPLICATION = "macweb.wsgi.application"
ASGI_APPLICATION = "macweb.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "macweb.dashboard.context.monitoring_links",
            ],
        },
    },
]

# --- Database: SQLite in the data directory unless DATABASE_URL says otherwise.
_database_url = text("DATABASE_URL")
# Seconds a PostgreSQL statement may run (the server's statement_timeout); the client
# gives up on an unanswered one a second later (macweb.db_deadline: a hung server).
# 0 turns both off; `mac start master` runs migrate with 0.
DB_STATEMENT_TIMEOUT = setting("MAC_DB_STATEMENT_TIMEOUT")
if _database_url:
    try:
        _db = dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None
    # --- PostgreSQL connection pool (inventory, issue 2). Under ASGI each request runs its
    # sync code in a thread of its own with a connection of its own, so a burst of agents
    # registering at once exceeded max_connections; a per-process pool caps and reuses them.
    # MAC_DB_POOL_SIZE=0 turns it off (persistent connections instead).
    _pool_size = setting("MAC_DB_POOL_SIZE")
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend with COMMIT and ROLLBACK under the statement deadline too.
        _db["ENGINE"] = "macweb.postgresql"
        # During an outage a connection attempt gives up after a few seconds (libpq's
        # default is to wait for the OS, minutes for a black-holed server), and so does a
        # request waiting for a pooled connection: /health and registration then answer
        # 503 "database unavailable" quickly (issue 11) instead of hanging for 30 s.
        _db.setdefault("OPTIONS", {}).setdefault(
            "connect_timeout", setting("MAC_DB_CONNECT_TIMEOUT")
        )
        if DB_STATEMENT_TIMEOUT:
            # Set by libpq at connection time: no statement of its own per connection.
            _options = _db["OPTIONS"].get("options", "")
            _db["OPTIONS"]["options"] = (
                f"{_options} -c statement_timeout={round(DB_STATEMENT_TIMEOUT * 1000)}"
            ).strip()
            # Django's health check of a reused connection (MAC_DB_POOL_SIZE=0) runs its
            # SELECT 1 outside the deadline and would hang on a hung server; without it,
            # a connection that died fails its next statement quickly and is replaced.
            _db["CONN_HEALTH_CHECKS"] = False
    if _pool_size and _db["ENGINE"] == "macweb.postgresql":
        _db["CONN_MAX_AGE"] = 0  # Django refuses persistent connections together with a pool
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": _pool_size,
            # How long a request waits for a pooled connection: long enough for a burst
            # of registrations to queue, short enough to report an outage in seconds.
            "timeout": setting("MAC_DB_POOL_TIMEOUT"),
        }
else:
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA_DIR / "mac.sqlite3",
        # WAL and a busy timeout let the API, worker and beat share one file.
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
if text("MAC_TEST_DB_NAME"):
    # Lets several test runs share one PostgreSQL server without colliding.
    _db["TEST"] = {"NAME": text("MAC_TEST_DB_NAME")}
DATABASES = {"default": _db}
# Threads per API worker that run requests (macweb.asgi); each holds at most one
# database connection, so keep it at or under MAC_DB_POOL_SIZE.
API_THREADS = setting("MAC_API_THREADS")
# Of those threads, how many may wait on each outside service at once (alerting.bulkheads);
# a request past them fails at once with the reason, so that /health, the agents and the
# pages that read only the database always find a free thread.
# Charts that may wait on Prometheus at once per worker: they wait on the event loop,
# holding no request thread (macweb.asgi), so a page's eight and a few more fit.
BULKHEAD_PROMETHEUS = setting("MAC_BULKHEAD_PROMETHEUS")
BULKHEAD_ALERTMANAGER = setting("MAC_BULKHEAD_ALERTMANAGER")
BULKHEAD_BROKER = setting("MAC_BULKHEAD_BROKER")

# --- The proxy in front of the API server (nginx, macweb/nginxconf.py; docs/security.md).
# Seconds a client has to send its request headers, and at most between two reads of
# its body; past either, the connection is closed.
API_REQUEST_TIMEOUT = setting("MAC_API_REQUEST_TIMEOUT")
# Seconds an idle keep-alive connection is kept.
API_KEEPALIVE = setting("MAC_API_KEEPALIVE")
# Client connections the proxy holds at once; more are closed as they arrive.
API_MAX_CONNECTIONS = setting("MAC_API_MAX_CONNECTIONS")
# Requests one client address may have in progress at once; more get 429.
API_MAX_CONNECTIONS_PER_ADDRESS = setting("MAC_API_MAX_CONNECTIONS_PER_ADDRESS")
# Bytes of request line and headers; more get 431.
API_MAX_HEADER_BYTES = setting("MAC_API_MAX_HEADER_BYTES")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker, Channels layer, locks and rate limits.
REDIS_URL = text("MAC_REDIS_URL")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py's pool refuses (not waits) past max_connections (default 100): every
            # dashboard joining the group at once, e.g. after a restart, takes one briefly.
            "hosts": [
                {
                    "address": REDIS_URL,
                    "max_connections": setting("MAC_CHANNEL_MAX_CONNECTIONS"),
                    # channels_redis blocks 5 s in BZPOPMIN; redis-py 8's default 5 s read
                    # timeout would end every idle consumer just then.
                    "socket_timeout": 15,
                }
            ],
            "prefix": text("MAC_CHANNEL_PREFIX"),
            "capacity": setting("MAC_CHANNEL_CAPACITY"),
            "expiry": 30,
        },
    },
}
# This installation's id, made once by prepare_master: the master's records in the cache
# (the node alerts it posted, their statistics, the engines' checks...) are under it, so
# a new master on a Redis that another used before never reads, nor posts, that one's
# history. MAC_CACHE_PREFIX replaces it; before prepare_master, "mac".
INSTALLATION_ID_FILE = DATA_DIR / "installation_id"
INSTALLATION_ID = file_value(
    INSTALLATION_ID_FILE, "fix its owner or mode, or run manage.py prepare_master"
)
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": (
            text("MAC_CACHE_PREFIX") or (f"mac-{INSTALLATION_ID}" if INSTALLATION_ID else "mac")
        ),
        # The rate limit shares one cache per process (inventory.api.throttles): past
        # max_connections a burst's threads wait up to `timeout` s for a connection
        # instead of failing (redis-py's plain pool refuses past 100).
        "OPTIONS": {
            "pool_class": "redis.BlockingConnectionPool",
            "max_connections": 100,
            "timeout": 5,
            "socket_timeout": 5,
            "socket_connect_timeout": 5,
        },
    }
}

# --- Probing.
PROBE_INTERVAL = setting("MAC_PROBE_INTERVAL")
PROBE_TIMEOUT = setting("MAC_PROBE_TIMEOUT")
PROBE_CONCURRENCY = setting("MAC_PROBE_CONCURRENCY")
# Sharded sweeps (healthcheck.chunks): a fleet larger than the chunk size is split into
# chunk tasks of at most that many nodes, sent to PROBE_QUEUE; a smaller fleet is swept
# in one task, as on a single worker. Workers near the nodes consume PROBE_QUEUE
# (`celery worker -Q`); the master's worker consumes every queue of CELERY_TASK_QUEUES.
SWEEP_CHUNK_SIZE = setting("MAC_SWEEP_CHUNK_SIZE")
PROBE_QUEUE = text("MAC_PROBE_QUEUE")
SD_DIR = setting("MAC_SD_DIR")
PROMETHEUS_URL = text("MAC_PROMETHEUS_URL")
# Scale-out mode (docs/scaling.md, scraping.engines): MAC_SCRAPE_SHARDS vmagent
# scrapers and one store; `mac start master` sets the scrapers' URLs and points
# MAC_PROMETHEUS_URL (what every metrics reader queries) at the store.
SCRAPE_SHARDS = setting("MAC_SCRAPE_SHARDS")
SCRAPER_URLS = setting("MAC_SCRAPER_URLS")
# Where /api/v1/targets is answered for the whole fleet: Prometheus, or in scale-out
# mode the merged view on its port (MAC_PROMETHEUS_URL is then the store, which has no
# view of the scrapers' targets).
TARGETS_URL = text("MAC_TARGETS_URL")
# Scale-out mode's rule evaluator (vmalert), watched by /health beside the store and the
# scrapers; `mac start master` sets it.
RULES_URL = text("MAC_RULES_URL")
METRICS_MIN_FREE_BYTES = setting("MAC_METRICS_MIN_FREE_BYTES")
# GPU verdicts (inventory.services.health, docs/gpu-health.md): the same fault of a GPU
# in more than this many boots after the first escalates to inspect_hardware (1: it came
# back after one reboot; GPUd waits for 2)...
GPU_FAULT_REBOOTS = setting("MAC_GPU_FAULT_REBOOTS")
# ...counting the boots of the last this many days.
GPU_FAULT_DAYS = setting("MAC_GPU_FAULT_DAYS")

# Prometheus' scrape and rule-evaluation interval (manage.py prometheus_config).
SCRAPE_INTERVAL = setting("MAC_SCRAPE_INTERVAL")
# `for:` of MAC's alert rules, overridden per rule: "MacNodeOffline=3m,GpuXidError=0s"
# (scraping.promconfig.parse_rule_for renders the rules with them; docs/alerts.md).
ALERT_FOR = text("MAC_ALERT_FOR")
# Prefixed to each rule's runbook_url (docs/troubleshooting.md#...), e.g. where the docs
# are published; empty keeps the path relative to a MAC checkout.
RUNBOOK_BASE_URL = text("MAC_RUNBOOK_BASE_URL")

# --- Alerts (the alerting app, docs/alerts.md): Alertmanager, channels, maintenance.
# The Alertmanager that MAC's Prometheus sends to, the dashboard reads and silences go to.
ALERTMANAGER_URL = text("MAC_ALERTMANAGER_URL")
# Whether MAC writes that Alertmanager's configuration from the notification channels;
# off for a site's own Alertmanager (its routes are the site's).
ALERTMANAGER_MANAGED = setting("MAC_ALERTMANAGER_MANAGED")
# alertmanager.yml and the notification templates MAC generates (mac.tmpl).
ALERTMANAGER_DIR = setting("MAC_ALERTMANAGER_DIR")
ALERTMANAGER_TIMEOUT = setting("MAC_ALERTMANAGER_TIMEOUT")
# Validates each channel's piece of configuration (Debian's prometheus-alertmanager).
AMTOOL_BIN = text("MAC_AMTOOL_BIN")
# How often beat asks Alertmanager for the firing alerts (the dashboard's live list)
# and puts back missing maintenance silences.
ALERT_POLL_INTERVAL = setting("MAC_ALERT_POLL_INTERVAL")
ALERT_GROUP_WAIT = setting("MAC_ALERT_GROUP_WAIT")
ALERT_GROUP_INTERVAL = setting("MAC_ALERT_GROUP_INTERVAL")
ALERT_REPEAT_INTERVAL = setting("MAC_ALERT_REPEAT_INTERVAL")
# group_wait of the node alerts' route (MacNodeOffline, which the master posts itself at
# the sweep that finds a node Offline, alerting.nodealerts): seconds, not half a minute.
ALERT_NODE_GROUP_WAIT = setting("MAC_ALERT_NODE_GROUP_WAIT")
# group_interval of that route: how soon an incident's end is sent once its group has
# notified; by default the probe interval, at most 5 s (contract.settings.monitoring).
# Grouping per node and incident (down_since) keeps the rest out of it.
ALERT_NODE_GROUP_INTERVAL = setting("MAC_ALERT_NODE_GROUP_INTERVAL")
# The dashboard's address as people reach it, for the node link in notifications.
PUBLIC_URL = text("MAC_PUBLIC_URL")
# A channel made at `mac start master` (manage.py alert_channels_from_env), for a first
# install without the admin.
ALERT_WEBHOOK_URL = text("MAC_ALERT_WEBHOOK_URL")
ALERT_EMAIL_TO = text("MAC_ALERT_EMAIL_TO")
SMTP_HOST = text("MAC_SMTP_HOST")
SMTP_PORT = setting("MAC_SMTP_PORT")
SMTP_USER = text("MAC_SMTP_USER")
SMTP_PASSWORD = text("MAC_SMTP_PASSWORD")
SMTP_FROM = text("MAC_SMTP_FROM")
SMTP_TLS = setting("MAC_SMTP_TLS")
# Django's own mail (the password-reset link, macweb.accounts) goes through that server
# too when it is set; else through the host's own mail server on port 25.
if SMTP_HOST:
    EMAIL_HOST, EMAIL_PORT = SMTP_HOST, SMTP_PORT
    EMAIL_HOST_USER, EMAIL_HOST_PASSWORD = SMTP_USER, SMTP_PASSWORD
    EMAIL_USE_SSL = SMTP_PORT == 465  # TLS from the start; else STARTTLS per MAC_SMTP_TLS
    EMAIL_USE_TLS = SMTP_TLS and not EMAIL_USE_SSL
DEFAULT_FROM_EMAIL = SMTP_FROM or "mac@localhost"
EMAIL_TIMEOUT = 10  # seconds: a request thread never waits longer on the mail server

# --- Celery.
CELERY_BROKER_URL = text("MAC_CELERY_BROKER_URL")
# Seconds one broker read, write or connect may take (a request's publish takes at most
# about two of them, see CELERY_TASK_PUBLISH_RETRY_POLICY).
BROKER_SOCKET_TIMEOUT = setting("MAC_BROKER_SOCKET_TIMEOUT")
CELERY_TIMEZONE = "UTC"
# Every queue the master uses. A worker started without -Q (the master's own, under
# both runtimes) consumes all of them, so chunk tasks routed to MAC_PROBE_QUEUE are
# never left without a consumer; probe workers elsewhere consume only theirs (-Q).
CELERY_TASK_DEFAULT_QUEUE = "celery"
# Each with an exchange and routing key of its own name, as Celery makes a queue that
# -Q names: a queue left to Celery's defaults would share `celery`'s routing key and
# get a copy of every task.
CELERY_TASK_QUEUES = [
    Queue(name, Exchange(name), routing_key=name)
    for name in dict.fromkeys([CELERY_TASK_DEFAULT_QUEUE, PROBE_QUEUE])
]
CELERY_TASK_ROUTES = {"healthcheck.tasks.probe_chunk": {"queue": PROBE_QUEUE}}
# Results exist only to carry each chunk's figures to its chord's callback
# (healthcheck.chunks): Redis keeps them (the chord's own counting needs a result
# backend), every other task ignores its result, and they expire, with the chord's
# bookkeeping, 10 intervals (at least 2 minutes) after they were written.
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_EXPIRES = int(max(10 * PROBE_INTERVAL, 120))
# A message is acknowledged only after its task ran (acks late), and a pool process
# that dies mid-task gives its message back at once (reject on worker lost). A whole
# worker killed (SIGKILL, the OOM killer, its machine) cannot give anything back: the
# Redis transport hands its unacknowledged message out again `visibility_timeout`
# seconds after delivery, looking every `unacked_restore_interval` seconds (whole
# seconds, at least 1). The timeout is never below what a task may take, else a task
# still running is handed to a second worker and its nodes probed twice in one sweep
# (harmless: fenced writes, one event per change, the chord counts a chunk once; but
# the whole chunk's load again): two probe timeouts (a slow node's grace,
# contract.liveness) and a second to write, plus CHUNK_SECONDS_PER_NODE for each node
# of a chunk (MAC_SWEEP_CHUNK_SIZE; a sweep in one process is at most that large too).
# Otherwise it is a third of the interval, so that a lost small chunk runs again within
# the same sweep, while its lock still holds: back at most 1/3 + 1/10 of an interval
# after delivery, against a lock that lives at least 0.675 of an interval after its
# holder died (healthcheck.state: TTL 0.9 interval, extended every quarter of it). A
# chunk that takes longer may come back after its sweep's lock expired: the next sweep
# probes its nodes instead. At the defaults (30 s, 3 s, 10,000 nodes): 27 s, looked for
# every 3 s.
# The slowest chunk measured (docs/benchmarks.md, Sweep): the first sweep after 10,000
# nodes registered, every one changing status, 13.43 s in one process (1.34 ms a node,
# its one probe timeout included); 2 ms a node leaves room for a busier machine.
CHUNK_SECONDS_PER_NODE = 0.002
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": max(
        PROBE_INTERVAL / 3,
        2 * PROBE_TIMEOUT + 1 + SWEEP_CHUNK_SIZE * CHUNK_SECONDS_PER_NODE,
    ),
    "unacked_restore_interval": max(1, int(PROBE_INTERVAL / 10)),
    "unacked_restore_throttle": 1,  # every look really looks (kombu's default: every 10th)
    # A hung Redis (SIGSTOP, a wedged VM) still accepts connections: without these a
    # publish from a request waited as long as Redis did (issue 26). The read timeout
    # stays above kombu's BRPOP wait (1 s), which the worker's idle reads sit in.
    "socket_timeout": BROKER_SOCKET_TIMEOUT,
    "socket_connect_timeout": BROKER_SOCKET_TIMEOUT,
}
CELERY_BROKER_CONNECTION_TIMEOUT = BROKER_SOCKET_TIMEOUT
# A publish tries twice, then gives up: what it carried is reconciled by a poll anyway
# (inventory.services.events.announce_maintenance_on_commit says so to the caller).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}

# --- Dashboard (macweb.dashboard): how long a chart waits for Prometheus' query_range.
DASHBOARD_PROMETHEUS_TIMEOUT = setting("MAC_DASHBOARD_PROMETHEUS_TIMEOUT")

# --- Registration security.
JOIN_TOKEN = text("MAC_JOIN_TOKEN")
NODE_NETWORKS = setting("MAC_NODE_NETWORKS")
MAX_NODES = setting("MAC_MAX_NODES")
REGISTER_RATE = text("MAC_REGISTER_RATE")
# The `cluster_name` label on every target (AMD's dashboards filter on it first).
CLUSTER_NAME = text("MAC_CLUSTER_NAME")
# Addresses a reverse proxy in front of the API may speak for (X-Forwarded-For).
TRUSTED_PROXIES = setting("MAC_TRUSTED_PROXIES")
# --- Hostile clients (docs/security.md).
# /metrics needs `Authorization: Bearer <token>`: MAC_METRICS_TOKEN, else the file that
# prepare_master makes at the first start (like the secret key); MAC's Prometheus config
# sends it. MAC_METRICS_TOKEN=off opens /metrics to anyone who reaches the front door.
METRICS_TOKEN_FILE = DATA_DIR / "metrics_token"
_metrics_token, METRICS_TOKEN_SOURCE = env_or_file_secret(
    ("MAC_METRICS_TOKEN",), METRICS_TOKEN_FILE
)
METRICS_TOKEN_OFF = _metrics_token.lower() == "off"
METRICS_TOKEN = "" if METRICS_TOKEN_OFF else _metrics_token
# The http_sd endpoint (/api/v1/sd/<job>, scraping.httpsd) needs MAC_SD_TOKEN, or the
# metrics token when that is unset; with neither it is closed. Prometheus sends it as
# `Authorization: Bearer <token>` (manage.py prometheus_config --shard).
SD_TOKEN = text("MAC_SD_TOKEN") or METRICS_TOKEN
# Notification channels (webhook, Slack) may not point at loopback, link-local, cloud
# metadata or the master's own addresses (alerting.destinations), except in these networks.
CHANNEL_ALLOWED_NETWORKS = setting("MAC_CHANNEL_ALLOWED_NETWORKS")
# Origins (scheme://host[:port]) whose pages may open the dashboard's WebSocket; empty
# means the master's own: the hosts of MAC_ALLOWED_HOSTS, or the socket's own Host.
ALLOWED_ORIGINS = setting("MAC_ALLOWED_ORIGINS") or []

# --- Password logins (admin, dashboard): django-axes, see macweb.login_limits.
AUTHENTICATION_BACKENDS = [
    "macweb.login_limits.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = setting("MAC_LOGIN_FAILURE_LIMIT")
AXES_COOLOFF_TIME = timedelta(minutes=setting("MAC_LOGIN_COOLOFF_MINUTES"))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "macweb.login_limits.client_ip"
AXES_LOCKOUT_CALLABLE = "macweb.login_limits.lockout_response"
AXES_VERBOSE = False  # no banner in every manage.py command's output
AXES_DISABLE_ACCESS_LOG = True  # failures are what count; no row per successful login

# --- Django REST framework and the OpenAPI schema.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MAC master API",
    "DESCRIPTION": "Node inventory and registration for MAC, the GPU and RDMA cluster monitor.",
    "VERSION": "1",
    # 3.1 (JSON Schema 2020-12) can say what the server checks: key patterns
    # (propertyNames) and null members, so that schema and server agree.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from the installed sidecar package, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two choice fields are named "kind": an event's and a notification channel's.
    "ENUM_NAME_OVERRIDES": {
        "EventKindEnum": "inventory.choices.EventKind",
        "ChannelKindEnum": "alerting.choices.ChannelKind",
        "GpuVendorEnum": "inventory.choices.GpuVendor",
        "HealthStateEnum": "inventory.choices.HealthState",
        "HealthActionEnum": "inventory.choices.HealthAction",
    },
}
DATA_UPLOAD_MAX_MEMORY_SIZE = setting("MAC_MAX_BODY_BYTES")

# --- TLS on the front door (macweb.tls, docs/tls.md): the master's own CA and server
# certificate in TLS_DIR, or the site's chain and key; HTTP beside it on, off or redirected.
TLS_DIR = setting("MAC_TLS_DIR")
TLS_CERT = text("MAC_TLS_CERT")
TLS_KEY = text("MAC_TLS_KEY")
# Names and addresses added to the master's server certificate (agents that reach it by
# a name or NAT address the master cannot see itself).
TLS_NAMES = setting("MAC_TLS_NAMES")
# What plain HTTP does beside it (contract.settings.HttpMode).
HTTP_MODE = setting("MAC_HTTP")

# --- The scheduler link (docs/slurm.md). Slurm's own SLURM_CONF says where slurm.conf is,
# as it does for Slurm's tools; job attribution is on whenever that file exists.
SLURM_CONF = setting("SLURM_CONF")
# MAC's hostname -> Slurm's NodeName where they differ ("gpu-01.dc=gpu01,..." or
# "@/path/to/file" with one pair a line); by default the short host name is the NodeName.
SLURM_NODE_MAP = text("MAC_SLURM_NODE_MAP")
# The drain (scheduler.drainpass, docs/slurm.md): off, dry-run or on; at most
# MAC_DRAIN_BUDGET of the fleet drained by MAC at once; `scontrol reboot ASAP` for a
# verdict whose action is reboot only where MAC_SLURM_REBOOT allows it; a node MAC drained
# resumes after MAC_SLURM_RESUME_SWEEPS healthy sweeps in a row.
SLURM_DRAIN = setting("MAC_SLURM_DRAIN")
DRAIN_BUDGET = setting("MAC_DRAIN_BUDGET")
SLURM_RESUME_SWEEPS = setting("MAC_SLURM_RESUME_SWEEPS")
SLURM_REBOOT = setting("MAC_SLURM_REBOOT")
# Job attribution (scheduler.jobread, docs/jobs.md): on whenever slurm.conf exists; jobs
# are kept as long as the metrics they are joined with.
METRICS_RETENTION_SECONDS = duration_seconds(setting("MAC_METRICS_RETENTION"))

# --- Static files and the login flow.
STATIC_URL = "/static/"
STATIC_ROOT = setting("MAC_STATIC_ROOT")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Where the proxy's redirects send people for HTTPS: the port other hosts reach it on
# (Docker publishes it there); unset: the port HTTPS listens on.
TLS_PORT = setting("MAC_TLS_PORT")

# --- Which Host the master answers to (macweb.hosts): its own names and addresses, the
# ones `mac start master` passes (MAC_TLS_HOST_NAMES, and under Docker the host's
# MAC_HOST_ADDRESSES), MAC_TLS_NAMES, MAC_PUBLIC_URL's host; MAC_ALLOWED_HOSTS adds more,
# and `*` answers to any. Another Host gets 400.
ALLOWED_HOSTS = master_hosts(
    extra=setting("MAC_ALLOWED_HOSTS") or [],
    tls_names=TLS_NAMES,
    host_names=setting("MAC_TLS_HOST_NAMES"),
    host_addresses=setting("MAC_HOST_ADDRESSES"),
    public_url=PUBLIC_URL,
)
# nginx (macweb.nginxconf) replaces X-Forwarded-Proto on every request with the scheme the
# client used, and the API server is reachable only through it: so a request is secure
# exactly when it came over HTTPS. Session and CSRF cookies are then sent with Secure
# (macweb.cookies); plain HTTP on the master's loopback keeps working without it.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": str(setting("MAC_LOG_LEVEL"))},
    "loggers": {"django.request": {"level": "ERROR"}},
}
