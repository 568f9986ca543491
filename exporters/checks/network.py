"""IPv4 forwarding: on now, persisted for the next boot, and re-asserted by systemd-networkd.

Bridge-networked exporters are reached through DNAT, which needs the kernel to forward;
with net.ipv4.ip_forward = 0 the master sees only the host-network nic-exporter and
marks the node offline. A carrier event under systemd-networkd can reset the flag at
run time, so a sysctl.d file alone is not enough: a networkd drop-in re-enables it.
"""

from __future__ import annotations

import re
from pathlib import Path

from contract.services import SERVICES
from exporters.checks.base import CheckContext, CheckResult, CheckStatus, runner

SYSCTL_FILE = "/etc/sysctl.d/99-mac-ipforward.conf"
NETWORKD_KEY_SINCE = 256  # systemd 256 renamed IPForward= to IPv4Forwarding=
_TRUE = {"1", "yes", "true", "on", "ipv4", "both"}
_BRIDGE_PORTS = ", ".join(str(s.port) for s in SERVICES if s.network == "bridge")
_HOST_SERVICES = ", ".join(f"{s.name} ({s.port})" for s in SERVICES if s.network == "host")


def _roots(ctx: CheckContext) -> tuple[Path, Path, Path]:
    return (
        Path(ctx.etc_root),
        Path(ctx.extra.get("run_root", "/run")),
        Path(ctx.extra.get("usr_root", "/usr")),
    )


_BRIDGE_PORT_SET = {str(s.port) for s in SERVICES if s.network == "bridge"}
_DPORT = re.compile(r"--dport (\d+)\b")
_NOT_NEEDED = (
    "; harmless for now: no exporter port is DNAT'd here (no Docker-published ports), "
    "but the agent's containers will need it."
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


def _off_status(ctx: CheckContext) -> tuple[CheckStatus, str]:
    """FAIL where forwarding carries the exporters' traffic, WARN where nothing needs it yet."""
    if exporter_ports_dnatted(ctx) is False:
        return CheckStatus.WARN, _NOT_NEEDED
    return CheckStatus.FAIL, ""


def check_ip_forward(ctx: CheckContext) -> CheckResult:
    path = Path(ctx.proc_root, "sys/net/ipv4/ip_forward")
    title = "IPv4 forwarding is on"
    try:
        value = path.read_text().strip()
    except OSError as exc:
        return CheckResult("ip_forward", title, CheckStatus.SKIP, f"cannot read {path}: {exc}")
    if value == "1":
        return CheckResult("ip_forward", title, CheckStatus.PASS, "net.ipv4.ip_forward = 1")
    status, note = _off_status(ctx)
    if note:
        detail = f"net.ipv4.ip_forward = {value}{note}"
    else:
        detail = (
            f"net.ipv4.ip_forward = {value}: the bridge services ({_BRIDGE_PORTS}) are "
            f"unreachable from the master, only {_HOST_SERVICES} answers."
        )
    return CheckResult("ip_forward", title, status, detail, "sudo sysctl -w net.ipv4.ip_forward=1")


# --- sysctl.d -----------------------------------------------------------------------------


def sysctl_files(ctx: CheckContext) -> list[Path]:
    """The files `sysctl --system` reads, in its order (a name in /etc masks the others)."""
    etc, run, usr = _roots(ctx)
    by_name: dict[str, Path] = {}
    for directory in (usr / "lib/sysctl.d", run / "sysctl.d", etc / "sysctl.d"):
        if directory.is_dir():
            for path in directory.glob("*.conf"):
                by_name[path.name] = path  # later directories take precedence
    files = [by_name[name] for name in sorted(by_name)]
    if (etc / "sysctl.conf").is_file():
        files.append(etc / "sysctl.conf")
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
        if "net.ipv4.ip_forward" in values:
            effective, where = values["net.ipv4.ip_forward"], path
    fix = f"echo 'net.ipv4.ip_forward = 1' | sudo tee {SYSCTL_FILE}\nsudo sysctl --system"
    if effective == "1":
        return CheckResult(
            "ip_forward_persisted", title, CheckStatus.PASS, f"net.ipv4.ip_forward = 1 ({where})"
        )
    if effective is None:
        detail = "no sysctl.d file sets net.ipv4.ip_forward, so it is 0 after a reboot"
    else:
        detail = f"{where} sets net.ipv4.ip_forward = {effective}, so it is off after a reboot"
        fix = (
            f"sudo sed -i 's/^[[:space:]]*net.ipv4.ip_forward[[:space:]]*=.*/"
            f"net.ipv4.ip_forward = 1/' {where}\nsudo sysctl --system"
        )
    status, note = _off_status(ctx)
    return CheckResult("ip_forward_persisted", title, status, detail + (note or "."), fix)


# --- systemd-networkd ---------------------------------------------------------------------


def parse_unit(text: str) -> dict[str, dict[str, str]]:
    """A systemd INI file as {section: {key: last value}}."""
    sections: dict[str, dict[str, str]] = {}
    current = sections.setdefault("", {})
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), {})
        elif "=" in line:
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    return sections


def systemd_version(ctx: CheckContext) -> int | None:
    if "systemd_version" in ctx.extra:
        return ctx.extra["systemd_version"]
    result = runner(ctx)(["systemctl", "--version"])
    match = re.match(r"systemd (\d+)", result.stdout.strip())
    return int(match.group(1)) if match else None


def _network_files(ctx: CheckContext) -> dict[str, Path]:
    etc, run, _usr = _roots(ctx)
    found: dict[str, Path] = {}
    # Only configured links count: /usr/lib/systemd/network holds distribution defaults.
    for directory in (run / "systemd/network", etc / "systemd/network"):
        if directory.is_dir():
            for path in directory.glob("*.network"):
                found[path.name] = path
    return found


def _effective_network(ctx: CheckContext, path: Path) -> dict[str, dict[str, str]]:
    etc, run, usr = _roots(ctx)
    merged = parse_unit(path.read_text())
    dropins: dict[str, Path] = {}
    for base in (usr / "lib/systemd/network", run / "systemd/network", etc / "systemd/network"):
        directory = base / f"{path.name}.d"
        if directory.is_dir():
            for conf in directory.glob("*.conf"):
                dropins[conf.name] = conf
    for name in sorted(dropins):
        for section, values in parse_unit(dropins[name].read_text()).items():
            merged.setdefault(section, {}).update(values)
    return merged


def _global_forwarding(ctx: CheckContext) -> bool:
    """systemd >= 256 also accepts IPv4Forwarding= in networkd.conf for every link."""
    etc = Path(ctx.etc_root)
    files = [
        etc / "systemd/networkd.conf",
        *sorted((etc / "systemd/networkd.conf.d").glob("*.conf")),
    ]
    value = ""
    for path in files:
        if path.is_file():
            value = parse_unit(path.read_text()).get("Network", {}).get("IPv4Forwarding", value)
    return value.lower() in _TRUE


def check_networkd_forwarding(ctx: CheckContext) -> CheckResult:
    title = "systemd-networkd re-enables IPv4 forwarding on every link"
    networks = _network_files(ctx)
    if not networks:
        return CheckResult(
            "ip_forward_networkd", title, CheckStatus.SKIP, "systemd-networkd manages no link here."
        )
    active = runner(ctx)(["systemctl", "is-active", "systemd-networkd"]).stdout.strip()
    if active in {"inactive", "failed"}:
        return CheckResult(
            "ip_forward_networkd", title, CheckStatus.SKIP, f"systemd-networkd is {active}."
        )
    version = systemd_version(ctx)
    new_key = version is not None and version >= NETWORKD_KEY_SINCE
    key = "IPv4Forwarding" if new_key else "IPForward"
    if new_key and _global_forwarding(ctx):
        return CheckResult(
            "ip_forward_networkd",
            title,
            CheckStatus.PASS,
            "networkd.conf sets IPv4Forwarding=yes for every link",
        )
    missing: list[tuple[str, str]] = []
    wrong_key: list[str] = []
    for name, path in sorted(networks.items()):
        unit = _effective_network(ctx, path)
        section = unit.get("Network", {})
        iface = (unit.get("Match", {}).get("Name") or path.stem).split()[0]
        accepted = [key] if version is not None else ["IPForward", "IPv4Forwarding"]
        if any(section.get(k, "").lower() in _TRUE for k in accepted):
            continue
        if new_key and section.get("IPForward", "").lower() in _TRUE:
            wrong_key.append(name)
        missing.append((name, iface))
    shown = f"systemd {version}" if version is not None else "systemd (version unknown)"
    if not missing:
        return CheckResult(
            "ip_forward_networkd",
            title,
            CheckStatus.PASS,
            f"{shown}: {key}=yes on {', '.join(sorted(networks))}",
        )
    fix_lines = []
    for name, iface in missing:
        dropin = f"/etc/systemd/network/{name}.d"
        fix_lines += [
            f"sudo mkdir -p {dropin}",
            f"printf '[Network]\\n{key}=yes\\n' | sudo tee {dropin}/ipforward.conf",
            f"sudo networkctl reconfigure {iface}",
        ]
    detail = (
        f"{shown}: {', '.join(n for n, _ in missing)} lack {key}=yes, so a carrier event "
        "can leave ip_forward at 0."
    )
    if wrong_key:
        detail += f" {', '.join(wrong_key)} use IPForward=, which systemd {version} replaced."
    return CheckResult("ip_forward_networkd", title, CheckStatus.FAIL, detail, "\n".join(fix_lines))


CHECKS = (check_ip_forward, check_ip_forward_persisted, check_networkd_forwarding)
