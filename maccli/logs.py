"""`mac logs <service>`: what one service printed, under the runtime that runs it here.

- docker: `docker logs [--tail N] [-f] mac-<service>` (maccli.runtimes.dockerlogs). The
  Docker master's mac-redis and mac-prometheus too.
- process: the service's log file, `<state>/<role>/logs/<service>.log`
  (maccli.runtimes.logfiles); -f keeps printing what is appended, until Ctrl-C.

The api-server logs every request there (gunicorn's access log goes to its stdout), so
`mac logs api-server | grep /api/v1/register` shows the agents' registrations.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys

from contract.services import SERVICES, SYS_EXPORTER
from maccli.agent.bundled import BUNDLE_NAME
from maccli.output import CliError
from maccli.runtimes import choose_runtime
from node.config import NodeConfig

# The services of `mac start master` (maccli.master.specs), by name, and
# mac-redis, which only the Docker master runs (the process runtime uses the host's).
MASTER_SERVICES = ("api-server", "worker", "beat", "prometheus", "alertmanager", "redis", "proxy",
                   # Scale-out mode (MAC_SCRAPE_SHARDS, maccli.master.scaleout), with scraper-K.
                   "store", "rules")  # fmt: skip
SCRAPER = re.compile(r"scraper-\d+")
AGENT_SERVICES = tuple(service.name for service in SERVICES)


def role_of(service: str, role: str | None = None) -> tuple[str, str]:
    """(service, role) for a name as typed; `mac-<service>` (the container) is accepted."""
    name = service.strip()
    if name not in AGENT_SERVICES + MASTER_SERVICES and name.startswith("mac-"):
        name = name[len("mac-") :]
    master = name in MASTER_SERVICES or SCRAPER.fullmatch(name)
    owner = "agent" if name in AGENT_SERVICES else "master" if master else ""
    if not owner:
        raise CliError(
            f"unknown service {service!r}.",
            hint=(
                f"Agent services: {', '.join(AGENT_SERVICES)}.\n"
                f"Master services: {', '.join(MASTER_SERVICES)}.\nFor example:"
            ),
            commands=["mac logs sys-exporter", "mac logs api-server | grep /api/v1/register"],
            code=2,
        )
    if role and role != owner:
        raise CliError(
            f"{name} is {_a(owner)} service, not {_a(role)} one.",
            hint="Leave --role out (it follows from the name):",
            commands=[f"mac logs {name}"],
            code=2,
        )
    return name, owner


def _a(role: str) -> str:
    return f"an {role}" if role == "agent" else f"a {role}"


def logs(
    service: str,
    role: str | None = None,
    lines: int | None = None,
    follow: bool = False,
    runtime_name: str | None = None,
) -> int:
    name, role = role_of(service, role)
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, role, runtime_name)
    # The agent's Python services share one process and its log (maccli.agent.bundled).
    shared = (BUNDLE_NAME,) if role == "agent" and name != SYS_EXPORTER.name else ()
    try:
        return runtime.logs(role, name, lines, follow, shared=shared)
    except BrokenPipeError:
        # `mac logs ... | head`: the reader has gone, which is not an error.
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
