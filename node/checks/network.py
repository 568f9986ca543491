"""IPv4 forwarding: on now, and persisted for the next boot (networkd's part: networkd.py).

Bridge-networked exporters are reached through DNAT, which needs the kernel to forward;
with net.ipv4.ip_forward = 0 the master sees only the host-network nic-exporter and
marks the node offline. A carrier event under systemd-networkd can reset the flag at
run time, so a sysctl.d file alone is not enough: a networkd drop-in re-enables it.

/proc/sys/net belongs to the network namespace of the process that reads it. `mac
doctor`, the process runtime and host mode's sys-manager share the node's network, so
they read the flag there. In bridge mode sys-manager has a namespace of its own, and
reads the node's flag from the host's pid 1 instead (/proc/1/net/snmp, which shows that
process's namespace to a reader in any other): `read_forwarding`, used by the check
below and by sys-manager's watch (exporters.ipforward).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from contract.diagnosis import IPFORWARD_SYSCTL_FILE
from contract.services import SERVICES, AgentNetwork
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, runner
from node.checks.fixes import ApplySysctlFile, SetSysctl, SetSysctlInFile, WriteFile
from node.host import Roots

KEY = "net.ipv4.ip_forward"
PROC_FILE = "/proc/sys/net/ipv4/ip_forward"
SNMP_FILE = "/proc/1/net/snmp"  # the host's init: its namespace is the node's
# The Ip: Forwarding column (RFC 1213's ipForwarding): 1 forwarding, 2 not.
_SNMP_FORWARDING = {"1": 1, "2": 0}
TURN_ON = SetSysctl(KEY, "1")
_BRIDGE_PORTS = ", ".join(str(s.port) for s in SERVICES if s.network == "bridge")
_HOST_SERVICES = ", ".join(f"{s.name} ({s.port})" for s in SERVICES if s.network == "host")


@dataclass(frozen=True)
class Forwarding:
    """The node's net.ipv4.ip_forward as read from `path`, or why it could not be."""

    value: int | None  # 1 on, 0 off, None unknown
    path: Path
    problem: str = ""


def parse_ip_forward(text: str) -> int:
    """The content of /proc/sys/net/ipv4/ip_forward; ValueError unless 0 or 1."""
    value = text.strip()
    if value not in {"0", "1"}:
        raise ValueError(f"holds {value[:20]!r}, not 0 or 1")
    return int(value)


def parse_snmp_forwarding(text: str) -> int:
    """ip_forward (1 or 0) from /proc/<pid>/net/snmp: the Forwarding column of its Ip:
    header and value lines. ValueError, saying what is missing, otherwise."""
    rows = [line.split()[1:] for line in text.splitlines() if line.startswith("Ip:")]
    if len(rows) < 2:
        raise ValueError("has no Ip: header and value lines")
    header, values = rows[0], rows[1]
    if "Forwarding" not in header or len(values) != len(header):
        raise ValueError("has no Forwarding value on its Ip: lines")
    raw = values[header.index("Forwarding")]
    if raw not in _SNMP_FORWARDING:
        raise ValueError(f"has Forwarding {raw[:20]!r}, not 1 (on) or 2 (off)")
    return _SNMP_FORWARDING[raw]


def read_forwarding(roots: Roots, netns_of_its_own: bool = False) -> Forwarding:
    """The node's net.ipv4.ip_forward, read under `roots`.

    `netns_of_its_own`: this process runs in a network namespace that is not the node's
    (sys-manager in bridge mode), where /proc/sys/net is that namespace's: the flag is
    then read from the host's pid 1 (/proc/1/net/snmp, under the host's procfs).
    """
    path = roots.host(SNMP_FILE if netns_of_its_own else PROC_FILE)
    parse = parse_snmp_forwarding if netns_of_its_own else parse_ip_forward
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return Forwarding(None, path, f"cannot read {path}: {exc.strerror or exc}")
    try:
        return Forwarding(parse(text), path)
    except ValueError as exc:
        return Forwarding(None, path, f"{path} {exc}")


def netns_differs(roots: Roots) -> bool | None:
    """Whether the kernel shows this process a network namespace other than the host's
    pid 1's; None where it will not say (reading pid 1's link needs ptrace rights)."""
    try:
        return os.readlink(roots.proc("self/ns/net")) != os.readlink(roots.proc("1/ns/net"))
    except OSError:
        return None


def netns_of_its_own(ctx: CheckContext) -> bool:
    """Whether the checks run in a network namespace that is not the node's (sys-manager in
    bridge mode says so in ctx.extra); `mac doctor` runs in the node's."""
    return bool(ctx.extra.get("netns_of_its_own"))


_BRIDGE_PORT_SET = {str(s.port) for s in SERVICES if s.network == "bridge"}
_DPORT = re.compile(r"--dport (\d+)\b")
_NOT_NEEDED = (
    "; harmless for now: no exporter port is DNAT'd here (no Docker-published ports), "
    "but the agent's containers will need it."
)
_NEW_INSTALL = (
    "; not needed: no mode is chosen yet (MAC_AGENT_NETWORK unset, never registered), so "
    "`mac start agent` runs the exporters on the host network, which needs no forwarding "
    "(`--network bridge` would: then run this again)."
)
_HOST_MODE = (
    "; not needed: the agent's exporters run on the host network (MAC_AGENT_NETWORK=host) "
    "and no exporter port is DNAT'd, so the master reaches them without forwarding."
)


def exporter_ports_dnatted(ctx: CheckContext) -> bool | None:
    """Whether the nat table DNATs an exporter port (Docker's published ports, or a rule
    made by hand): only then must the kernel forward for the master to reach it.
    None when the node's rules cannot be read (no iptables, not root, or a network
    namespace of its own, whose rules are not the node's): assume they are."""
    if netns_of_its_own(ctx):
        return None
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
    exporters' traffic; SKIP in host mode, where nothing is DNAT'd and nothing will be,
    and on a node with no mode chosen yet (a new install starts in host mode); WARN where
    nothing needs it yet (bridge containers not started)."""
    if exporter_ports_dnatted(ctx) is False:
        cfg = config(ctx)
        mode = cfg.get("MAC_AGENT_NETWORK")
        if mode == AgentNetwork.HOST:
            return CheckStatus.SKIP, _HOST_MODE
        if not mode and not cfg.node_key:
            # Never registered, no mode chosen: `mac start agent` starts a new install in
            # host mode (maccli.agent.network), which needs no forwarding either.
            return CheckStatus.SKIP, _NEW_INSTALL
        return CheckStatus.WARN, _NOT_NEEDED
    return CheckStatus.FAIL, ""


def check_ip_forward(ctx: CheckContext) -> CheckResult:
    title = "IPv4 forwarding is on"
    found = read_forwarding(ctx.roots, netns_of_its_own(ctx))
    if found.value is None:
        return CheckResult("ip_forward", title, CheckStatus.SKIP, found.problem)
    shown = f"{KEY} = {found.value}"
    if netns_of_its_own(ctx):
        shown += f" (the host's, from {ctx.host(found.path)})"
    if found.value == 1:
        return CheckResult("ip_forward", title, CheckStatus.PASS, shown)
    status, note = off_status(ctx)
    if note:
        detail = f"{shown}{note}"
    else:
        detail = (
            f"{shown}: the bridge services ({_BRIDGE_PORTS}) are "
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
    steps = (
        WriteFile(IPFORWARD_SYSCTL_FILE, f"{KEY} = 1\n"),
        ApplySysctlFile(IPFORWARD_SYSCTL_FILE),
    )
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
