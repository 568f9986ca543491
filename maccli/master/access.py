"""How people and agents get in once the master runs: the admin user (createadmin), the
master's CA read where the proxy keeps it, and the lines that join an agent."""

from __future__ import annotations

import os
import subprocess
import sys

from contract.pinning import first_certificate, spki_sha256
from maccli import output
from maccli.master.layout import DATA_VOLUME, Layout
from maccli.master.preflight import ROLE, has_command, http_mode, tls_port
from maccli.master.specs import ADMIN_SAID
from maccli.output import CliError
from maccli.runtimes import Runtime, ServiceSpec
from node.config import NodeConfig
from node.runner import run_command


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


def admin_said(runtime: Runtime, layout: Layout) -> str:
    """What the api-server's container said of the admin user (a generated password among
    it) since `mac` last asked, once: read from the data volume, where it waits readable
    by root alone (specs.ADMIN_SAID), then removed. Empty when nothing new was said."""
    path = layout.data / ADMIN_SAID
    try:
        said = runtime.read_file(ROLE, "api-server", path).decode(errors="replace").strip()
    except OSError:
        return ""  # no start of the api-server since; or it does not run (status says so)
    removal = runtime.one_off(["rm", "-f", str(path)], volumes={DATA_VOLUME: layout.data})
    done = run_command(removal, timeout=120)
    if done.returncode != 0:
        output.warn(
            f"could not remove {path} from the {DATA_VOLUME} volume, which holds the admin "
            f"password: {(done.stderr or done.stdout).strip()}. Remove it: "
            f"docker exec mac-api-server rm {path}"
        )
    return said


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
