"""IPv4 forwarding: on now, and persisted for the next boot (networkd's part: networkd.py).

Bridge-networked exporters are reached through DNAT, which needs the kernel to forward;
with net.ipv4.ip_forward = 0 the master sees only the host-network nic-exporter and
marks the node offline. A carrier event under systemd-networkd can reset the flag at
run time, so a sysctl.d file alone is not enough: a networkd drop-in re-enables it.

/proc/sys/net belongs to the network namespace of the process that reads it, so the
checks (and sys-manager's watch, exporters.ipforward) see the namespace they run in:
the host's under the process runtime and in host-network mode.
"""

from __future__ import annotations

import re
from pathlib import Path

from contract.services import SERVICES, AgentNetwork
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, runner
from node.checks.fixes import ApplySysctlFile, SetSysctl, SetSysctlInFile, WriteFile

KEY = "net.ipv4.ip_forward"
PROC_FILE = "/proc/sys/net/ipv4/ip_forward"
SYSCTL_FILE = "/etc/sysctl.d/99-mac-ipforward.conf"
TURN_ON = SetSysctl(KEY, "1")
_BRIDGE_PORTS = ", ".join(str(s.port) for s in SERVICES if s.network == "bridge")
_HOST_SERVICES = ", ".join(f"{s.name} ({s.port})" for s in SERVICES if s.network == "host")


_BRIDGE_PORT_SET = {str(s.port) for s in SERVICES if s.network == "bridge"}
_DPORT = re.compile(r"--dport (\d+)\b")
_NOT_NEEDED = (
    "; harmless for now: no exporter port is DNAT'd here (no Docker-published ports), "
    "but the agent's containers will need it."
)
_HOST_MODE = (
    "; not needed: the agent's exporters run on the host network (MAC_AGENT_NETWORK=host) "
    "and no exporter port is DNAT'd, so the master reaches them without forwarding."
)


def exporter_ports_dnatted(ctx: CheckContext) -> bool | None:
    """Whether the nat table DNATs an exporter port (Docker's published ports, or a rule
    made by hand): only then must the kernel forward for the master to reach it.
    None when the rules cannot be read (no iptables, not root): assume they are."""
    result = runner(ctx)(["iptables", "-t", "nat", "-S"])
    if result.returncode != 0:
        return None
    for line in result.stdout.splitlines():
        match = _DPORT.search(line)
        if "DNAT" in line and match and match.group(1) in _BRIDGE_PORT_SET:
            return True
    return False


def off_status(ctx: CheckContext) -> tuple[CheckStatus, str]:
    """How much forwarding being off matters here, and why: FAIL where it carries the
    exporters' traffic; SKIP in host mode, where nothing is DNAT'd and nothing will be;
    WARN where nothing needs it yet (bridge containers not started)."""
    if exporter_ports_dnatted(ctx) is False:
        if config(ctx).get("MAC_AGENT_NETWORK") == AgentNetwork.HOST:
            return CheckStatus.SKIP, _HOST_MODE
        return CheckStatus.WARN, _NOT_NEEDED
    return CheckStatus.FAIL, ""


def check_ip_forward(ctx: CheckContext) -> CheckResult:
    path = ctx.local(PROC_FILE)
    title = "IPv4 forwarding is on"
    try:
        value = path.read_text().strip()
    except OSError as exc:
        return CheckResult("ip_forward", title, CheckStatus.SKIP, f"cannot read {path}: {exc}")
    if value == "1":
        return CheckResult("ip_forward", title, CheckStatus.PASS, "net.ipv4.ip_forward = 1")
    status, note = off_status(ctx)
    if note:
        detail = f"net.ipv4.ip_forward = {value}{note}"
    else:
        detail = (
            f"net.ipv4.ip_forward = {value}: the bridge services ({_BRIDGE_PORTS}) are "
            f"unreachable from the master, only {_HOST_SERVICES} answers."
        )
    return CheckResult("ip_forward", title, status, detail, steps=(TURN_ON,))


# --- sysctl.d -----------------------------------------------------------------------------


def sysctl_files(ctx: CheckContext) -> list[Path]:
    """The files `sysctl --system` reads, in its order (a name in /etc masks the others)."""
    by_name: dict[str, Path] = {}
    for host_dir in ("/usr/lib/sysctl.d", "/run/sysctl.d", "/etc/sysctl.d"):
        directory = ctx.local(host_dir)
        if directory.is_dir():
            for path in directory.glob("*.conf"):
                by_name[path.name] = path  # later directories take precedence
    files = [by_name[name] for name in sorted(by_name)]
    if ctx.local("/etc/sysctl.conf").is_file():
        files.append(ctx.local("/etc/sysctl.conf"))
    return files


def parse_sysctl(text: str) -> dict[str, str]:
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.lstrip("-").partition("=")
        values[key.strip().replace("/", ".")] = value.strip()
    return values


def check_ip_forward_persisted(ctx: CheckContext) -> CheckResult:
    title = "IPv4 forwarding is persisted in sysctl.d"
    effective, where = None, None
    for path in sysctl_files(ctx):
        try:
            values = parse_sysctl(path.read_text())
        except OSError:
            continue
        if KEY in values:
            effective, where = values[KEY], path
    steps = (WriteFile(SYSCTL_FILE, f"{KEY} = 1\n"), ApplySysctlFile(SYSCTL_FILE))
    if effective == "1":
        return CheckResult(
            "ip_forward_persisted",
            title,
            CheckStatus.PASS,
            f"net.ipv4.ip_forward = 1 ({ctx.host(where)})",
        )
    if effective is None:
        detail = "no sysctl.d file sets net.ipv4.ip_forward, so it is 0 after a reboot"
    else:
        shown = ctx.host(where)
        detail = f"{shown} sets net.ipv4.ip_forward = {effective}, so it is off after a reboot"
        steps = (SetSysctlInFile(shown, KEY, "1"), ApplySysctlFile(shown))
    status, note = off_status(ctx)
    return CheckResult("ip_forward_persisted", title, status, detail + (note or "."), steps=steps)


CHECKS = (check_ip_forward, check_ip_forward_persisted)
