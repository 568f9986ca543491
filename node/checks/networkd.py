"""systemd-networkd turns IPv4 forwarding back on whenever it configures the primary link.

The guide's observed failure: a RoCE NIC gains carrier, the network is reconfigured and
net.ipv4.ip_forward drops to 0 mid-run, after sysctl.d has long been applied. networkd
only ever switches forwarding on, so a drop-in with the forwarding key on the link it
manages re-asserts the flag on every (re)configuration of that link.

The link is the primary one, the link of the default route (/proc/net/route, else
`ip route show default`, else the first link `networkctl list` shows configured); its
.network file is the one networkd says it uses (`networkctl status <link>`), else the
first file whose [Match] Name= fits the link, as networkd would pick it. The key is
`IPForward=` before systemd 256 and `IPv4Forwarding=` from 256 on. networkd reads a new
drop-in only on `networkctl reload`; `networkctl reconfigure` then applies it (verified
under a real systemd-networkd: tests/maccli/test_nspawn_systemd.py).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from contract.diagnosis import IPFORWARD_DROPIN, ipforward_dropin_dir, networkd_apply
from node.checks.base import CheckContext, CheckResult, CheckStatus, runner
from node.checks.fixes import MakeDirs, Run, WriteFile
from node.checks.network import off_status
from node.host import default_route

NETWORKD_KEY_SINCE = 256  # systemd 256 renamed IPForward= to IPv4Forwarding=
NETWORK_DIRS = (  # lowest precedence first; a name in a later one masks the earlier
    "/lib/systemd/network",  # the same folder as /usr/lib's on merged-/usr systems
    "/usr/lib/systemd/network",
    "/run/systemd/network",
    "/etc/systemd/network",
)
_TRUE = {"1", "yes", "true", "on", "ipv4", "both"}
_CONFIGURED = {"configured", "configuring"}


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


def parse_default_route(text: str) -> str | None:
    """The interface of the lowest-metric default route in /proc/net/route's format."""
    route = default_route(text)
    return route.interface if route else None


def parse_networkctl_list(text: str) -> str | None:
    """The first non-loopback link that networkd has configured, from `networkctl list`."""
    for line in text.splitlines():
        fields = line.split()
        # IDX LINK TYPE OPERATIONAL SETUP
        managed = len(fields) >= 5 and fields[0].isdigit() and fields[4] in _CONFIGURED
        if managed and fields[2] != "loopback":
            return fields[1]
    return None


def primary_interface(ctx: CheckContext) -> str | None:
    try:
        found = parse_default_route(ctx.local("/proc/net/route").read_text())
    except OSError:
        found = None
    if found:
        return found
    route = runner(ctx)(["ip", "route", "show", "default"])
    match = re.search(r"\bdev (\S+)", route.stdout) if route.returncode == 0 else None
    if match:
        return match.group(1)
    listed = runner(ctx)(["networkctl", "list", "--no-legend", "--no-pager"])
    return parse_networkctl_list(listed.stdout) if listed.returncode == 0 else None


def network_files(ctx: CheckContext) -> list[str]:
    """Host paths of every .network file, in networkd's order (by name, masked by name)."""
    by_name: dict[str, str] = {}
    for directory in NETWORK_DIRS:
        local = ctx.local(directory)
        if local.is_dir():
            for path in local.glob("*.network"):
                by_name[path.name] = f"{directory}/{path.name}"
    return [by_name[name] for name in sorted(by_name)]


def _matches(ctx: CheckContext, host_path: str, iface: str) -> bool:
    try:
        names = parse_unit(ctx.local(host_path).read_text()).get("Match", {}).get("Name", "")
    except OSError:
        return False
    return any(fnmatch.fnmatchcase(iface, pattern) for pattern in names.split())


def network_file(ctx: CheckContext, iface: str) -> str | None:
    """The .network file networkd applies to `iface` (a host path), or None if none does."""
    status = runner(ctx)(["networkctl", "status", iface, "--no-pager"])
    if status.returncode == 0:
        match = re.search(r"Network File:\s*(\S+)", status.stdout)
        if match:
            return None if match.group(1) == "n/a" else match.group(1)
    # networkctl cannot tell (not installed, no D-Bus, a container): match as networkd does.
    return next((path for path in network_files(ctx) if _matches(ctx, path, iface)), None)


def effective_network(ctx: CheckContext, host_path: str) -> dict[str, dict[str, str]]:
    """The .network file with its drop-ins (<name>.d/*.conf in every directory) applied."""
    merged = parse_unit(ctx.local(host_path).read_text())
    name = Path(host_path).name
    dropins: dict[str, Path] = {}
    for directory in NETWORK_DIRS:
        local = ctx.local(f"{directory}/{name}.d")
        if local.is_dir():
            for conf in local.glob("*.conf"):
                dropins[conf.name] = conf
    for conf_name in sorted(dropins):
        for section, values in parse_unit(dropins[conf_name].read_text()).items():
            merged.setdefault(section, {}).update(values)
    return merged


def systemd_version(ctx: CheckContext) -> int | None:
    if "systemd_version" in ctx.extra:
        return ctx.extra["systemd_version"]
    for program in ("systemctl", "networkctl"):
        result = runner(ctx)([program, "--version"])
        match = re.match(r"systemd (\d+)", result.stdout.strip())
        if match:
            return int(match.group(1))
    return None


def forwarding_key(version: int | None) -> str:
    new = version is not None and version >= NETWORKD_KEY_SINCE
    return "IPv4Forwarding" if new else "IPForward"


def _global_forwarding(ctx: CheckContext) -> bool:
    """systemd >= 256 also accepts IPv4Forwarding= in networkd.conf for every link."""
    dropins = ctx.local("/etc/systemd/networkd.conf.d")
    files = [
        ctx.local("/etc/systemd/networkd.conf"),
        *(sorted(dropins.glob("*.conf")) if dropins.is_dir() else []),
    ]
    value = ""
    for path in files:
        if path.is_file():
            value = parse_unit(path.read_text()).get("Network", {}).get("IPv4Forwarding", value)
    return value.lower() in _TRUE


def dropin_steps(network: str, iface: str, key: str) -> tuple:
    """Write the drop-in, have networkd read it, and configure the link with it (the same
    drop-in and commands as the master's fix text: contract.diagnosis)."""
    directory = ipforward_dropin_dir(network)
    return (
        MakeDirs(directory),
        WriteFile(f"{directory}/{IPFORWARD_DROPIN}", f"[Network]\n{key}=yes\n"),
        *(Run(argv) for argv in networkd_apply(iface)),
    )


def check_ip_forward_networkd(ctx: CheckContext) -> CheckResult:
    title = "systemd-networkd re-enables IPv4 forwarding on the primary link"

    def skip(detail: str) -> CheckResult:
        return CheckResult("ip_forward_networkd", title, CheckStatus.SKIP, detail)

    active = runner(ctx)(["systemctl", "is-active", "systemd-networkd"]).stdout.strip()
    if active in {"inactive", "failed"}:
        return skip(f"systemd-networkd is {active}.")
    iface = primary_interface(ctx)
    if iface is None:
        if not network_files(ctx):
            return skip("systemd-networkd manages no link here.")
        return skip("no default route, and networkctl lists no configured link.")
    network = network_file(ctx, iface)
    if network is None:
        return skip(f"systemd-networkd does not manage {iface}.")
    version = systemd_version(ctx)
    key = forwarding_key(version)
    shown = f"systemd {version}" if version is not None else "systemd (version unknown)"
    if key == "IPv4Forwarding" and _global_forwarding(ctx):
        return CheckResult(
            "ip_forward_networkd",
            title,
            CheckStatus.PASS,
            f"{shown}: networkd.conf sets IPv4Forwarding=yes for every link",
        )
    try:
        section = effective_network(ctx, network).get("Network", {})
    except OSError as exc:
        return skip(f"cannot read {network}: {exc.strerror}")
    accepted = [key] if version is not None else ["IPForward", "IPv4Forwarding"]
    if any(section.get(name, "").lower() in _TRUE for name in accepted):
        return CheckResult(
            "ip_forward_networkd",
            title,
            CheckStatus.PASS,
            f"{shown}: {key}=yes for {iface} ({network})",
        )
    detail = (
        f"{shown}: {iface} ({network}) lacks {key}=yes, so a carrier event can leave "
        "ip_forward at 0."
    )
    if key == "IPv4Forwarding" and section.get("IPForward", "").lower() in _TRUE:
        detail += f" It sets IPForward=, which systemd {version} replaced."
    status, note = off_status(ctx)
    return CheckResult(
        "ip_forward_networkd",
        title,
        status,
        detail.removesuffix(".") + note if note else detail,
        steps=dropin_steps(network, iface, key),
    )


CHECKS = (check_ip_forward_networkd,)
