"""Why is a node offline? Read the answer off one sweep's probe results.

The master cannot log into a node, but the pattern of what answers says a lot:
nic-exporter runs on the host network while the other exporters sit behind
Docker's bridge and DNAT, so "the host network answers, the bridge times out" is
the signature of IPv4 forwarding switched off on the agent. That holds only for
an agent in bridge mode: in host mode (MAC_AGENT_NETWORK=host, reported at
registration) every exporter is on the host network and forwarding plays no part,
so the same pattern means sys-exporter hangs or a host firewall drops its port.
An agent older than the mode reports none and is judged as before (bridge).
`describe()` turns each code into a sentence and the commands that fix it; the
dashboard, the API and `mac status` all show the same text.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from contract.liveness import NodeProbe
from contract.outcomes import Diagnosis, Outcome
from contract.services import BY_NAME, NIC_EXPORTER, SYS_EXPORTER, AgentNetwork

BRIDGE_SERVICES = frozenset(
    name for name, service in BY_NAME.items() if service.network == "bridge"
)


def diagnose(probe: NodeProbe, network: str = "") -> str:
    """The Diagnosis code for one node's probes ("" while its sys-exporter answers).

    `network` is the node's agent_network as it registered: "host", "bridge", or ""
    for an agent older than the mode (judged as bridge, the only layout it had).
    """
    sys_result = probe.sys
    if sys_result.outcome is Outcome.OK:
        return Diagnosis.NONE
    if sys_result.outcome in (Outcome.HTTP_STATUS, Outcome.BAD_BODY, Outcome.ERROR):
        return Diagnosis.EXPORTER_BROKEN
    if sys_result.outcome is Outcome.REFUSED:
        return Diagnosis.SERVICE_DOWN
    if sys_result.outcome is Outcome.UNREACHABLE:
        return Diagnosis.HOST_DOWN
    # sys-exporter timed out: who else answered?
    if network == AgentNetwork.HOST:
        # No DNAT anywhere: another port of the host answering proves the path works.
        others = [r for name, r in probe.results.items() if name != SYS_EXPORTER.name]
        return (
            Diagnosis.PORT_BLOCKED if any(r.host_answered for r in others) else Diagnosis.HOST_DOWN
        )
    bridge = [r for name, r in probe.results.items() if name in BRIDGE_SERVICES]
    if any(r.host_answered for r in bridge):
        # Another bridge exporter gets through, so forwarding works: this one hangs.
        return Diagnosis.EXPORTER_BROKEN
    nic = probe.results.get(NIC_EXPORTER.name)
    if nic is not None and nic.host_answered:
        # The host's own stack answers on its network; only DNAT'd ports are dead.
        return Diagnosis.IP_FORWARD_OFF
    return Diagnosis.HOST_DOWN


# The cure for forwarding off, in the words `mac doctor` uses for it (node.checks.network
# and node.checks.networkd build their steps from these), so the master's fix text and
# doctor's name the same files and run the same commands in the same order.
IPFORWARD_SYSCTL_FILE = "/etc/sysctl.d/99-mac-ipforward.conf"
IPFORWARD_DROPIN = "mac-ipforward.conf"


def ipforward_dropin_dir(network_file: str) -> str:
    """Where MAC's drop-in for a .network file goes: /etc, whatever folder holds the file."""
    return f"/etc/systemd/network/{PurePosixPath(network_file).name}.d"


def networkd_apply(iface: str) -> tuple[tuple[str, ...], ...]:
    """The commands that make networkd use a new drop-in on a link: it reads drop-ins only
    on `reload`, and `reconfigure` then applies them to the link."""
    return (("networkctl", "reload"), ("networkctl", "reconfigure", iface))


_IFACE = "<iface>"  # the node's primary interface, see `networkctl list`
_DROPIN_DIR = ipforward_dropin_dir(f"10-netplan-{_IFACE}.network")

DESCRIPTIONS: dict[str, tuple[str, str]] = {
    Diagnosis.NONE: ("", ""),
    Diagnosis.IP_FORWARD_OFF: (
        "The node's host-network exporter (nic-exporter, port 29500) answers, but every "
        "exporter behind the Docker bridge times out. The kernel is not "
        "forwarding the DNAT'd packets: net.ipv4.ip_forward is 0 on the agent, typically "
        "reset at boot or by a network reconfiguration when a NIC gains carrier.",
        "On the agent, turn forwarding back on (the node returns on the next sweep):\n"
        "  sudo sysctl -w net.ipv4.ip_forward=1\n"
        "Keep it on across reboots:\n"
        f"  echo 'net.ipv4.ip_forward = 1' | sudo tee {IPFORWARD_SYSCTL_FILE}\n"
        f"  sudo sysctl -p {IPFORWARD_SYSCTL_FILE}\n"
        "Keep it on when systemd-networkd reconfigures a link (it only ever switches "
        "forwarding on), with a drop-in for the primary interface:\n"
        f"  sudo mkdir -p {_DROPIN_DIR}\n"
        "  printf '[Network]\\nIPForward=yes\\n' | sudo tee "
        f"{_DROPIN_DIR}/{IPFORWARD_DROPIN}\n"
        + "".join(f"  sudo {' '.join(argv)}\n" for argv in networkd_apply(_IFACE))
        + "(systemd 256 and later spell the key IPv4Forwarding=yes; `mac doctor` on the "
        "node prints these lines for its own link.)",
    ),
    Diagnosis.SERVICE_DOWN: (
        "The node is up, but nothing listens on the sys-exporter port (29101): the connection "
        "is refused, so the exporter service is stopped or crashed.",
        "On the agent, see which services run and start them again:\n"
        "  mac status\n"
        "  mac restart agent",
    ),
    Diagnosis.HOST_DOWN: (
        "Nothing on the node answers, not even the host-network nic-exporter: the host is "
        "down, or the network between the master and the node is cut (cable, switch, "
        "firewall, routing).",
        "From the master, check the path to the node:\n"
        "  ping -c3 <node-ip>\n"
        "  curl -m4 -o /dev/null -w '%{http_code}\\n' http://<node-ip>:29500/metrics\n"
        "Then power the node on or repair the network; it returns on the next sweep. "
        "A node that is gone for good leaves the inventory with `mac stop agent` on it.",
    ),
    Diagnosis.EXPORTER_BROKEN: (
        "The node answers, but its sys-exporter does not serve a Prometheus page: an HTTP "
        "error, a page that is not metrics, a reset connection, or a hang while other "
        "exporters on the same bridge respond.",
        "On the agent, look at the exporter and restart it:\n"
        "  curl -s http://127.0.0.1:29101/metrics | head\n"
        "  mac status\n"
        "  mac restart agent",
    ),
    Diagnosis.PORT_BLOCKED: (
        "The node runs its exporters on the host network (MAC_AGENT_NETWORK=host), and other "
        "ports of the host answer (nic-exporter on 29500 among them), but sys-exporter's "
        "port (29101) times out. This is not an ip_forward problem: in host mode nothing is "
        "DNAT'd, so forwarding plays no part. Either sys-exporter accepts connections and "
        "never replies (hung), or a firewall on the host drops that port.",
        "On the agent, see whether sys-exporter answers locally, and restart it if it hangs:\n"
        "  curl -m4 -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:29101/metrics\n"
        "  mac restart agent\n"
        "If it answers locally, a host firewall drops the port; look for the rule:\n"
        "  sudo iptables -S INPUT; sudo nft list ruleset | grep 29101",
    ),
}


def describe(code: str) -> tuple[str, str]:
    """(what it means, how to fix it) for any Diagnosis value; unknown codes say so."""
    try:
        return DESCRIPTIONS[Diagnosis(code)]
    except ValueError:
        return (f"Unknown diagnosis {code!r}.", "")
