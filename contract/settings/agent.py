"""The settings a node reads: `mac` on the agent side and the exporters.

Where a setting has an effect under one runtime only, `applies` says which, as the
code does today (the generated tables show it).
"""

from __future__ import annotations

from pathlib import Path

from contract.services import SERVICES, AgentNetwork
from contract.settings import readers
from contract.settings.kinds import (
    Address,
    Choice,
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
    Text,
    Url,
)
from contract.settings.model import Applies, Derived, Group, Setting, SetWith, Side

AGENT, BOTH = Side.AGENT, Side.BOTH
PROCESS, DOCKER = Applies.PROCESS, Applies.DOCKER


def service_port_name(service: str) -> str:
    """MAC_<SERVICE>_PORT of an agent service (sys-exporter -> MAC_SYS_EXPORTER_PORT)."""
    return f"MAC_{service.upper().replace('-', '_')}_PORT"


def _service_port(name: str, port: int) -> Setting:
    return Setting(
        service_port_name(name),
        Port(),
        Derived(f"{port} + MAC_PORT_OFFSET", lambda values: port + values["MAC_PORT_OFFSET"]),
        f"the port of {name}",
        AGENT,
    )


JOINING = Group(
    "Joining the master",
    (
        Setting(
            "MASTER_IP",
            HostName(),
            None,
            "the master's address or host name; `mac start agent` needs it (or MASTER_URL)",
            AGENT,
            readme=True,
        ),
        Setting(
            "MASTER_URL",
            Url(
                path=False,
                example="https://10.0.0.5:28443, from the join line of `mac start master`",
            ),
            None,
            "`https://<master>:28443` from the join line of `mac start master`; replaces "
            "MASTER_IP and MAC_MASTER_PORT",
            AGENT,
            see="docs/tls.md",
            readme=True,
        ),
        Setting(
            "MAC_MASTER_CA_SHA256",
            Custom(readers.ca_pin, "CA pin (64 hex digits)"),
            None,
            "the pin of the master's CA from that join line: the agent sends nothing to a "
            "master whose CA does not match, and never falls back to HTTP; without one "
            "`mac doctor` warns",
            AGENT,
            see="docs/tls.md",
            readme=True,
        ),
        Setting(
            "MAC_MASTER_PORT",
            Port(),
            28080,
            "the master's HTTP port: where agents reach it and its front door listens",
            BOTH,
            readme=True,
        ),
        Setting(
            "MAC_JOIN_TOKEN",
            Secret(),
            None,
            "the cluster join token: the master then requires it of every registration, "
            "which agents send as `Authorization: Bearer`",
            BOTH,
            see="docs/api.md",
            readme=True,
        ),
        Setting(
            "MAC_NODE_KEY",
            Secret(),
            None,
            "the node's key from its first registration, sent as `X-MAC-Node-Key`; "
            "written to the per-node file by `mac start agent`",
            AGENT,
            set_with=SetWith.MAC,
        ),
        Setting(
            "MAC_API_TOKEN",
            Secret(),
            None,
            "an API token of a master user (`manage.py drf_create_token <username>` on the "
            "master), sent as `Authorization: Token`: `mac probe` reads another node's "
            "network mode from the inventory with it",
            AGENT,
            see="docs/api.md",
        ),
        Setting(
            "NODE_NAME",
            HostName(address=False),
            Derived("the host name"),
            "the name this node registers under (per-node file only on a shared home)",
            AGENT,
            readme=True,
        ),
        Setting(
            "MAC_AGENT_IP",
            Address(),
            Derived("the address on the route to the master"),
            "the address the agent reports, where the master should probe it",
            AGENT,
        ),
        Setting(
            "MAC_LABELS",
            Custom(readers.labels, "key=value,..."),
            None,
            "labels sent with the registration, e.g. `rack=a1,role=gpu`",
            AGENT,
        ),
        Setting(
            "MAC_MASTER_TIMEOUT",
            Number(0.5, 300),
            Derived("10 to register, 5 for other calls"),
            "seconds each request to the master may take",
            AGENT,
        ),
    ),
)

SERVICES_GROUP = Group(
    "The agent's services",
    (
        Setting(
            "MAC_RUNTIME",
            Choice(
                {
                    "auto": "docker when an engine answers, else process",
                    "docker": "Compose project mac",
                    "process": "supervised local processes",
                },
                noun="a runtime",
            ),
            "auto",
            "what runs MAC's services on this host (`--runtime` overrides it)",
            BOTH,
            see="docs/cli.md#runtimes",
            readme=True,
        ),
        Setting(
            "MAC_AGENT_NETWORK",
            Choice(
                {
                    AgentNetwork.HOST: "every exporter on the host network, the default",
                    AgentNetwork.BRIDGE: "published ports, the guide's layout",
                },
                noun="a network mode",
                enum=AgentNetwork,
                exact_case=True,
            ),
            Derived("host for new installs"),
            "the agent's containers on the host network, or behind published ports "
            "(`mac start agent --network`); the process runtime is always host; written to "
            "the per-node file by the first `mac start agent`",
            AGENT,
            applies=DOCKER,
            see="docs/docker.md#host-or-bridge-network-mac_agent_network",
            readme=True,
        ),
        Setting(
            "MAC_BIND",
            Address(),
            "0.0.0.0",
            "the address the agent's services listen on",
            AGENT,
            applies=PROCESS,
        ),
        Setting(
            "MAC_PORT_OFFSET",
            Integer(-20000, 20000),
            0,
            "added to every agent service's port of the contract table; for several agents on "
            "one test host: the master probes and scrapes the contract's ports only, so "
            "`mac start agent` warns that such a node shows Offline",
            AGENT,
        ),
        *(_service_port(service.name, service.port) for service in SERVICES),
        Setting(
            "MAC_AGENT_SERVICES",
            ListOf(Choice({service.name: "" for service in SERVICES}, noun="an agent service")),
            Derived("all"),
            "the agent services to run, comma-separated",
            AGENT,
            applies=PROCESS,
        ),
        Setting(
            "MAC_AGENT_BUNDLE",
            Flag(),
            True,
            "the Python exporters share one process (one event loop, each isolated)",
            AGENT,
            applies=PROCESS,
        ),
        Setting(
            "MAC_START_TIMEOUT",
            Number(0, 3600),
            30.0,
            "seconds `mac start` waits for each service to answer (0: it does not wait)",
            BOTH,
        ),
        Setting(
            "MAC_STOP_GRACE",
            Number(0, 600),
            10.0,
            "seconds a service has to exit after SIGTERM before SIGKILL",
            BOTH,
            applies=PROCESS,
        ),
        Setting(
            "MAC_STATE_DIR",
            FilePath(),
            Derived("/var/lib/mac as root, else ~/.mac/state/<host>"),
            "pid files, logs and launch files of the services",
            BOTH,
            applies=PROCESS,
        ),
        Setting(
            "MAC_LOG_MAX_BYTES",
            Integer(1024, None, "bytes"),
            10 * 1024 * 1024,
            "size at which a service's log rotates",
            BOTH,
            applies=PROCESS,
        ),
        Setting(
            "MAC_LOG_BACKUPS",
            Integer(0, 100),
            5,
            "rotated logs kept per service",
            BOTH,
            applies=PROCESS,
        ),
        Setting(
            "MAC_SYSTEMD",
            Choice(
                {
                    "auto": "where the host boots with systemd and `mac` runs as root",
                    "yes": "always",
                    "no": "never touch systemd",
                },
                noun="a systemd choice",
            ),
            "auto",
            "a `mac-<role>.service` unit that starts the services at boot",
            BOTH,
            applies=PROCESS,
        ),
        Setting(
            "MAC_SYSTEMD_UNIT_DIR",
            FilePath(),
            Path("/etc/systemd/system"),
            "where that unit is written",
            BOTH,
            applies=PROCESS,
        ),
        Setting(
            "MAC_NODE_EXPORTER",
            Text(looks_like="program"),
            Derived("Debian's prometheus-node-exporter, else node_exporter on PATH"),
            "the node_exporter program that sys-exporter runs (MAC's image brings its own)",
            AGENT,
            applies=PROCESS,
        ),
        Setting(
            "MAC_TEXTFILE_DIR",
            FilePath(),
            Derived("<state dir>/agent/textfile"),
            "where MAC writes its facts for node_exporter's textfile collector",
            AGENT,
            applies=PROCESS,
        ),
    ),
)

EXPORTERS = Group(
    "The exporters",
    (
        Setting(
            "MAC_BMC_REDFISH_URL",
            Url(),
            None,
            "bmc-agent reads the BMC over Redfish at this address (`https://<bmc>`) instead "
            "of IPMI (`/dev/ipmi0` and ipmitool)",
            AGENT,
            applies=PROCESS,
            see="exporters/README.md",
            readme=True,
        ),
        Setting(
            "MAC_BMC_REDFISH_USER",
            Text(),
            None,
            "the Redfish user",
            AGENT,
            applies=PROCESS,
            readme=True,
        ),
        Setting(
            "MAC_BMC_REDFISH_PASSWORD",
            Secret(),
            None,
            "its password (put it in the root-only per-node file)",
            AGENT,
            applies=PROCESS,
            readme=True,
        ),
        Setting(
            "MAC_BMC_REDFISH_VERIFY_TLS",
            Flag(),
            False,
            "check the BMC's certificate (BMCs ship self-signed ones, so off by default)",
            AGENT,
            applies=PROCESS,
            readme=True,
        ),
        Setting(
            "MAC_IPFORWARD_REASSERT",
            Flag(),
            False,
            "sys-manager sets `net.ipv4.ip_forward` back to 1 the moment it drops (as root, "
            "or in Docker's host mode; bridge mode cannot, and says so)",
            AGENT,
            see="docs/troubleshooting.md#when-forwarding-drops-again-the-ip_forward-watch",
            readme=True,
        ),
        Setting(
            "MAC_IPFORWARD_INTERVAL",
            Number(0.05, 60),
            1.0,
            "seconds between sys-manager's reads of `ip_forward`",
            AGENT,
            applies_note="Docker: from the per-node file",
        ),
        Setting(
            "MAC_GPU_EVIDENCE_WINDOW",
            Number(1, 604800),
            3600.0,
            "seconds an XID, or a rise of the ECC or NVLink error counts, counts in a GPU's "
            "verdict (dcgm-exporter, rocm-exporter)",
            AGENT,
            see="docs/gpu-health.md#clearing",
            readme=True,
        ),
        Setting(
            "MAC_HPC_JOB_MAPPING_DIR",
            FilePath(absolute=True),
            None,
            "opt-in: dcgm-exporter adds `hpc_job` to each GPU's series from this folder, "
            "which MAC's Slurm prolog writes (contrib/slurm); off by default, since it "
            "repeats every GPU series per job",
            AGENT,
            see="docs/jobs.md#dcgm-exporters-hpc_job-label",
        ),
        Setting(
            "MAC_RDMA_INTERVAL",
            Number(0.05, 60),
            1.0,
            "seconds between the two reads of the RDMA counters in `mac doctor`",
            AGENT,
        ),
    ),
)

FILES = Group(
    "Where the node's configuration is",
    (
        Setting(
            "MAC_NODE_ENV_FILE",
            FilePath(folder=False),
            Path("/etc/mango/mac/env"),
            "the per-node file (root only)",
            BOTH,
            set_with=SetWith.ENVIRONMENT,
            see="docs/cli.md#configuration-mac-env",
        ),
        Setting(
            "MAC_USER_ENV_FILE",
            FilePath(folder=False),
            Derived("~/.mac/env", lambda values: Path("~/.mac/env").expanduser()),
            "the per-user file",
            BOTH,
            set_with=SetWith.ENVIRONMENT,
        ),
        Setting(
            "MAC_SHARED_HOME",
            Flag(),
            Derived("detected from /proc/mounts"),
            "whether the per-user file is on a network filesystem every node reads",
            BOTH,
            set_with=SetWith.ENVIRONMENT,
        ),
    ),
)


def _root(name: str, where: str, meaning: str, applies: Applies = Applies.BOTH) -> Setting:
    return Setting(name, FilePath(), Path(where), meaning, AGENT, applies=applies)


HOST_PATHS = Group(
    "Where the host is read (tests, containers)",
    (
        _root(
            "MAC_PROC_ROOT", "/proc", "the host's /proc for `mac`, `mac doctor` and the exporters"
        ),
        _root("MAC_SYS_ROOT", "/sys", "the host's /sys"),
        _root(
            "MAC_DEV_ROOT",
            "/dev",
            "the host's /dev (under Docker: where /dev/kfd and /dev/dri are)",
            Applies.BOTH,
        ),
        _root("MAC_ETC_ROOT", "/etc", "the host's /etc"),
        _root("MAC_RUN_ROOT", "/run", "the host's /run"),
        _root("MAC_USR_ROOT", "/usr", "the host's /usr"),
        _root("MAC_LIB_ROOT", "/lib", "the host's /lib"),
    ),
)

DOCKER_GROUP = Group(
    "Docker images and Compose",
    (
        Setting(
            "MAC_COMPOSE_DIR",
            FilePath(),
            Derived("docker/ of the checkout, else /usr/share/mac/docker"),
            "where the Compose files are",
            BOTH,
            applies=DOCKER,
            set_with=SetWith.ENVIRONMENT,
        ),
        Setting(
            "MAC_IMAGE",
            Text(looks_like="image name"),
            "mac:latest",
            "MAC's image (e.g. `REGISTRY/mac:latest` from a local registry)",
            BOTH,
            applies=DOCKER,
            see="docs/docker.md",
        ),
        Setting(
            "MAC_BASE_IMAGE",
            Text(looks_like="image name"),
            Derived("mac-base:bookworm when present, else python:3.11-slim"),
            "the base image MAC's image is built on",
            BOTH,
            applies=DOCKER,
            set_with=SetWith.ENVIRONMENT,
            see="docs/docker.md",
        ),
        Setting(
            "MAC_WHEELHOUSE",
            FilePath(),
            Derived("~/.cache/mac/wheelhouse"),
            "the Python wheels the image is built from, offline",
            BOTH,
            applies=DOCKER,
            set_with=SetWith.ENVIRONMENT,
            see="docs/docker.md",
        ),
        Setting(
            "MAC_ROOTFS_OPTIONS",
            Choice(
                {
                    "ro,rslave": "the host's mounts propagate",
                    "ro": "where the host's / is a private mount",
                },
                noun="a mount option",
            ),
            "ro,rslave",
            "how sys-exporter mounts the host's / in host mode (`mac` picks ro where it must)",
            AGENT,
            applies=DOCKER,
            see="docs/docker.md",
        ),
        Setting(
            "MAC_HEALTHCHECK_INTERVAL",
            Duration(docker=True),
            "30s",
            "how often Docker runs each container's health check",
            BOTH,
            applies=DOCKER,
        ),
        Setting(
            "MAC_LIVENESS",
            Text(looks_like="port/path"),
            None,
            "what a container's health check asks (its port and liveness path)",
            AGENT,
            applies=DOCKER,
            set_with=SetWith.MAC,
        ),
    ),
)

GROUPS = (JOINING, SERVICES_GROUP, EXPORTERS, FILES, HOST_PATHS, DOCKER_GROUP)
