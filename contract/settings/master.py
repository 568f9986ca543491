"""The settings of the master's services: its data, database, Redis, front door, security
and TLS, logins and the admin (macweb.settings reads each through the catalog)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from contract.settings import readers
from contract.settings.kinds import (
    Choice,
    Custom,
    FilePath,
    Flag,
    Integer,
    ListOf,
    Network,
    Number,
    Port,
    Secret,
    Text,
    Url,
)
from contract.settings.model import Applies, Derived, Group, Setting, SetWith, Side

MASTER, BOTH = Side.MASTER, Side.BOTH
PROCESS, DOCKER = Applies.PROCESS, Applies.DOCKER
# The checkout (or installed tree) MAC runs from: its var/ is the data folder by default.
CHECKOUT = Path(__file__).resolve().parents[2]
REDIS_SCHEMES = ("redis", "rediss", "unix")


class HttpMode(StrEnum):
    """What plain HTTP on the front door does (MAC_HTTP; docs/security.md)."""

    ON = "on"
    OFF = "off"
    REDIRECT = "redirect"


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


def _under_data(folder: str) -> Derived:
    return Derived(f"$MAC_DATA_DIR/{folder}", lambda values: values["MAC_DATA_DIR"] / folder)


DATA = Group(
    "The master's data and database",
    (
        Setting(
            "MAC_DATA_DIR",
            FilePath(),
            CHECKOUT / "var",
            "SQLite database, secret key, tokens, targets, TLS, Prometheus and Alertmanager data",
            MASTER,
            applies=PROCESS,
            applies_note="Docker: the mac-data volume",
            shown_default="var/ of the checkout (/var/lib/mac in the image)",
            readme=True,
        ),
        Setting(
            "DATABASE_URL",
            Url(("postgres", "postgresql", "postgis", "sqlite"), host=False),
            Derived("SQLite in $MAC_DATA_DIR/mac.sqlite3"),
            "the inventory's database, e.g. `postgres://mac@db:5432/mac`",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_DB_STATEMENT_TIMEOUT",
            Number(0, 3600),
            3.0,
            "PostgreSQL statement timeout; a statement left unanswered a second longer (a hung "
            "server) fails and the request gets a 503; 0 turns both off",
            MASTER,
            see="docs/operations.md#a-hung-postgresql",
            readme=True,
        ),
        Setting(
            "MAC_DB_POOL_SIZE",
            Integer(0, 1000),
            20,
            "PostgreSQL connections each process of the master pools; 0: no pool "
            "(persistent connections)",
            MASTER,
        ),
        Setting(
            "MAC_DB_POOL_TIMEOUT",
            Number(1, 300),
            5.0,
            "seconds a request waits for a pooled connection before a 503",
            MASTER,
        ),
        Setting(
            "MAC_DB_CONNECT_TIMEOUT",
            Integer(1, 300, "seconds"),
            3,
            "seconds a connection attempt to PostgreSQL may take",
            MASTER,
        ),
        Setting(
            "MAC_STATIC_ROOT",
            FilePath(),
            _under_data("static"),
            "where the dashboard's static files are collected",
            MASTER,
            applies=PROCESS,
        ),
    ),
)

REDIS = Group(
    "Redis and Celery",
    (
        Setting(
            "MAC_REDIS_URL",
            Url(REDIS_SCHEMES, host=False),
            "redis://127.0.0.1:6379/0",
            "Celery broker, Channels layer, cache and locks: one master per Redis database "
            "(another master on the same Redis takes `/1`, `/2`...)",
            MASTER,
            applies=PROCESS,
            applies_note="Docker: the master's own mac-redis",
            readme=True,
        ),
        Setting(
            "MAC_CELERY_BROKER_URL",
            Url(REDIS_SCHEMES, host=False),
            Derived("MAC_REDIS_URL", lambda values: values["MAC_REDIS_URL"]),
            "Celery's broker, where it is not the master's Redis",
            MASTER,
            applies=PROCESS,
            readme=True,
        ),
        Setting(
            "MAC_BROKER_SOCKET_TIMEOUT",
            Number(1.1, 60),
            1.5,
            "seconds one broker read, write or connect may take; a publish tries twice, then "
            "is left to the poll",
            MASTER,
            see="docs/operations.md",
            readme=True,
        ),
        Setting(
            "MAC_CACHE_PREFIX",
            Text(),
            Derived("mac-<installation id>"),
            "the prefix of the master's records in the cache; the installation id is made "
            "once in `$MAC_DATA_DIR/installation_id`, so a new master never reads the records "
            "of one that used the same Redis before",
            MASTER,
            applies=PROCESS,
            readme=True,
        ),
        Setting(
            "MAC_CHANNEL_PREFIX",
            Text(),
            "mac",
            "the prefix of the live feed's Channels keys in Redis",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_CHANNEL_CAPACITY",
            Integer(10, None),
            1000,
            "messages a dashboard's channel holds before the oldest are dropped",
            MASTER,
        ),
        Setting(
            "MAC_CHANNEL_MAX_CONNECTIONS",
            Integer(10, None),
            1000,
            "Redis connections the Channels layer may open per process",
            MASTER,
        ),
    ),
)

API = Group(
    "The API server and the front door",
    (
        Setting(
            "MAC_API_THREADS",
            Integer(1, 256),
            8,
            "threads per API worker that run requests (keep at or under MAC_DB_POOL_SIZE)",
            MASTER,
        ),
        Setting(
            "MAC_BULKHEAD_PROMETHEUS",
            Integer(1, 1024),
            16,
            "charts of an API worker that may wait on Prometheus at once; past them a chart "
            "answers 503 with the reason",
            MASTER,
            see="docs/operations.md#a-hung-prometheus-alertmanager-or-redis-bulkheads",
            readme=True,
        ),
        Setting(
            "MAC_BULKHEAD_ALERTMANAGER",
            Integer(1, 256),
            2,
            "requests of an API worker that may wait on Alertmanager at once (each holds one "
            "of its MAC_API_THREADS)",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_BULKHEAD_BROKER",
            Integer(1, 256),
            2,
            "requests of an API worker that may wait on the broker at once; past them a "
            "silence update is left to the poll",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_API_REQUEST_TIMEOUT",
            Number(0.5, 3600),
            30.0,
            "seconds a client has to send its headers, and at most between two reads of its "
            "body (nginx)",
            MASTER,
            see="docs/security.md#limits",
            readme=True,
        ),
        Setting(
            "MAC_API_KEEPALIVE",
            Integer(1, 3600, "seconds"),
            5,
            "seconds the front door keeps an idle connection",
            MASTER,
            see="docs/security.md#limits",
        ),
        Setting(
            "MAC_API_MAX_CONNECTIONS",
            Integer(10, None),
            1000,
            "client connections the front door holds at once; more are closed",
            MASTER,
            see="docs/security.md#limits",
            readme=True,
        ),
        Setting(
            "MAC_API_MAX_CONNECTIONS_PER_ADDRESS",
            Integer(1, None),
            100,
            "requests one client address may have in progress at once; more get 429",
            MASTER,
            see="docs/security.md#limits",
        ),
        Setting(
            "MAC_API_MAX_HEADER_BYTES",
            Integer(1024, None, "bytes"),
            32 * 1024,
            "bytes of request line and headers; more get 431",
            MASTER,
            see="docs/security.md#limits",
            readme=True,
        ),
        Setting(
            "MAC_MAX_BODY_BYTES",
            Integer(1024, None, "bytes"),
            256 * 1024,
            "bytes of a request body; more get 413",
            MASTER,
            see="docs/security.md#limits",
        ),
        Setting(
            "MAC_PUBLIC_URL",
            Url(),
            Derived("https://<the master's address>:28443"),
            "the front door as people reach it: node links in notifications, password-reset "
            "links, and the links Prometheus and Alertmanager make",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_HTTP",
            Choice(
                {
                    HttpMode.ON: "machines' endpoints; people's pages from other hosts go to HTTPS",
                    HttpMode.OFF: "loopback of the master only",
                    HttpMode.REDIRECT: "to HTTPS, but /health",
                },
                noun="an HTTP mode",
                enum=HttpMode,
            ),
            HttpMode.ON,
            "plain HTTP on 28080",
            MASTER,
            see="docs/security.md#passwords-never-cross-plain-http",
            readme=True,
        ),
    ),
)

SECURITY = Group(
    "Registration and security",
    (
        Setting(
            "MAC_NODE_NETWORKS",
            ListOf(Network()),
            [],
            "the only networks agents may register from and be probed in (unset: any but "
            "the always-refused ones)",
            MASTER,
            see="docs/api.md",
            readme=True,
        ),
        Setting(
            "MAC_MAX_NODES",
            Integer(1, None),
            20000,
            "the most nodes the master holds",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_REGISTER_RATE",
            Custom(readers.rate, "rate (600/min)"),
            "600/min",
            "registrations and deregistrations per address (nginx's `limit_req`) and per node "
            "key (the API)",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_TRUSTED_PROXIES",
            # Every address trusted is every client choosing its own (docs/security.md).
            ListOf(Network(everything=False)),
            [],
            "reverse proxies in front of the master whose X-Forwarded-For is believed",
            MASTER,
            see="docs/security.md",
            readme=True,
        ),
        Setting(
            "MAC_METRICS_TOKEN",
            Secret(),
            Derived("made once by prepare_master in $MAC_DATA_DIR/metrics_token"),
            "the bearer token `/metrics` needs (MAC's Prometheus sends it); `off` opens "
            "`/metrics` to anyone who reaches the front door",
            MASTER,
            see="docs/security.md#metrics",
            readme=True,
        ),
        Setting(
            "MAC_SD_TOKEN",
            Secret(),
            Derived("the metrics token"),
            "the bearer token of the http_sd endpoint (sharded Prometheus servers, "
            "scrapers on other hosts)",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_CHANNEL_ALLOWED_NETWORKS",
            ListOf(Network()),
            [],
            "networks a notification channel may point at although they are loopback, "
            "link-local or the master's own, e.g. `127.0.0.0/8`",
            MASTER,
            see="docs/security.md#notification-channels",
            readme=True,
        ),
        Setting(
            "MAC_ALLOWED_HOSTS",
            ListOf(Text()),
            Derived("the master's own names and addresses"),
            "more names the master answers to (`Host`; `.example.org` for a domain), `*` for "
            "any; another `Host` gets 400",
            MASTER,
            see="docs/security.md#which-host-the-master-answers-to",
            readme=True,
        ),
        Setting(
            "MAC_ALLOWED_ORIGINS",
            ListOf(Url(path=False)),
            Derived("the master's own"),
            "origins (scheme://host[:port]) whose pages may open the dashboard's WebSocket",
            MASTER,
            see="docs/security.md",
            readme=True,
        ),
        Setting(
            "MAC_CSRF_TRUSTED_ORIGINS",
            ListOf(Url(path=False)),
            [],
            "origins Django trusts for forms posted across them (a reverse proxy's own name)",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_HOST_ADDRESSES",
            ListOf(Text()),
            [],
            "the Docker host's addresses, which the master answers to",
            MASTER,
            applies=DOCKER,
            set_with=SetWith.MAC,
        ),
        Setting(
            "MAC_TLS_HOST_NAMES",
            ListOf(Text()),
            [],
            "the master's detected names and addresses, for its certificate and `Host`",
            MASTER,
            set_with=SetWith.MAC,
        ),
    ),
)

TLS = Group(
    "TLS",
    (
        Setting(
            "MAC_TLS_PORT",
            Port(),
            Derived("28443"),
            "the front door's HTTPS, and where plain HTTP's redirects send people",
            MASTER,
            see="docs/tls.md",
            readme=True,
        ),
        Setting(
            "MAC_TLS_DIR",
            FilePath(),
            _under_data("tls"),
            "the master's own CA and server certificate, made at the first start",
            MASTER,
            applies=PROCESS,
            applies_note="Docker: the mac-tls volume",
            see="docs/tls.md",
            readme=True,
        ),
        Setting(
            "MAC_TLS_CERT",
            FilePath(folder=False),
            None,
            "the site's own chain (server certificate first) instead; agents then pin the top "
            "of that chain",
            MASTER,
            see="docs/tls.md",
            readme=True,
        ),
        Setting(
            "MAC_TLS_KEY",
            FilePath(folder=False),
            None,
            "the key of that certificate, without a passphrase",
            MASTER,
            see="docs/tls.md",
            readme=True,
        ),
        Setting(
            "MAC_TLS_NAMES",
            ListOf(Text()),
            [],
            "more names or addresses for the master's server certificate, beside its detected "
            "ones; the master answers to them too",
            MASTER,
            see="docs/tls.md",
            readme=True,
        ),
    ),
)

LOGINS = Group(
    "Django, logins and the admin",
    (
        Setting(
            "SECRET_KEY",
            Secret(),
            Derived("made once by prepare_master in $MAC_DATA_DIR/secret_key"),
            "Django's secret key, the same for every process of the master (or MAC_SECRET_KEY)",
            MASTER,
            applies=PROCESS,
            applies_note="Docker: made in the mac-data volume",
            readme=True,
        ),
        Setting(
            "MAC_SECRET_KEY",
            Secret(),
            None,
            "the same, where SECRET_KEY is taken by something else",
            MASTER,
            applies=PROCESS,
        ),
        Setting("MAC_DEBUG", Flag(), False, "Django's debug mode; never in production", MASTER),
        Setting(
            "MAC_LOG_LEVEL",
            Choice({level.value: "" for level in LogLevel}, noun="a log level", enum=LogLevel),
            LogLevel.INFO,
            "the master's log level",
            MASTER,
            readme=True,
        ),
        Setting(
            "MAC_LOGIN_FAILURE_LIMIT",
            Integer(1, None),
            5,
            "failed logins from one address before it is refused for a while",
            MASTER,
            see="docs/security.md",
        ),
        Setting(
            "MAC_LOGIN_COOLOFF_MINUTES",
            Number(0.1, 10080, "minutes"),
            15.0,
            "how long that address is refused",
            MASTER,
            see="docs/security.md",
        ),
        Setting(
            "MAC_ADMIN_USER",
            Text(),
            "admin",
            "the superuser `mac start master` creates",
            MASTER,
            applies=PROCESS,
        ),
        Setting(
            "MAC_ADMIN_PASSWORD",
            Secret(),
            Derived("generated and shown once"),
            "its password (at least 8 characters)",
            MASTER,
        ),
    ),
)

GROUPS = (DATA, REDIS, API, SECURITY, TLS, LOGINS)
