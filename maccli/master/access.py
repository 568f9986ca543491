"""How people and agents get in once the master runs: the admin user (createadmin), the
master's CA read where the proxy keeps it, and the lines that join an agent."""

from __future__ import annotations

import os
import subprocess
import sys

from contract.pinning import first_certificate, spki_sha256
from maccli import output
from maccli.master.layout import Layout
from maccli.master.preflight import ROLE, has_command, http_mode, tls_port
from maccli.output import CliError
from maccli.runtimes import Runtime, ServiceSpec
from node.config import NodeConfig


def create_admin(specs: list[ServiceSpec]) -> str:
    """The first admin user (its password printed once), with the API server's settings."""
    if not has_command("inventory.management.commands.createadmin"):
        return ""
    env = {**os.environ, **specs[0].env}
    result = subprocess.run(
        [sys.executable, "-m", "django", "createadmin"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise CliError(
            f"createadmin failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}",
            commands=["python -m django createadmin"],
        )
    return result.stdout.strip()


def join_lines(cfg: NodeConfig, runtime: Runtime, layout: Layout, host: str) -> list[str]:
    """How agents join: over HTTPS with the CA's pin (kubeadm's CA hash), and without.
    The CA is read where the proxy keeps it."""
    url_host = f"[{host}]" if ":" in host else host
    try:
        pem = runtime.read_file(ROLE, "proxy", layout.tls / "ca.pem")
        pin = spki_sha256(first_certificate(pem))
    except (OSError, ValueError) as exc:
        output.warn(f"could not read the master's CA for the join line: {exc}")
        pin = "<on the master: mac start master prints it again>"
    lines = [
        f"Agents join: mac env set MASTER_URL=https://{url_host}:{tls_port(cfg)} && "
        f"mac env set MAC_MASTER_CA_SHA256={pin} && mac start agent"
    ]
    if http_mode(cfg) == "on":
        lines.append(f"  (unverified, plain HTTP: mac env set MASTER_IP={host} && mac start agent)")
    return lines
