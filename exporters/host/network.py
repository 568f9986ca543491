"""Network interface counters and link state (node_exporter's netdev and netclass)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporters.runtime import Roots, list_dir, read_int, read_text, read_value

RECEIVE_FIELDS = ("bytes", "packets", "errs", "drop", "fifo", "frame", "compressed", "multicast")
TRANSMIT_FIELDS = ("bytes", "packets", "errs", "drop", "fifo", "colls", "carrier", "compressed")


def parse_net_dev(text: str) -> dict[str, dict[str, int]]:
    """Parse /proc/net/dev into device -> {"receive_bytes": n, "transmit_packets": n, ...}."""
    devices: dict[str, dict[str, int]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        values = [int(value) for value in rest.split()]
        counters = {f"receive_{key}": values[i] for i, key in enumerate(RECEIVE_FIELDS)}
        counters.update({f"transmit_{key}": values[8 + i] for i, key in enumerate(TRANSMIT_FIELDS)})
        devices[name.strip()] = counters
    return devices


class NetDevSource:
    """node_network_{receive,transmit}_*_total{device}."""

    name = "netdev"
    inline = True  # in-memory procfs: cannot block

    def __init__(self, roots: Roots):
        # /proc/net is /proc/self/net: inside a bridge-networked container that is the
        # container's namespace. PID 1's view is the host's when the host /proc is mounted.
        self.paths = (roots.proc("1", "net", "dev"), roots.proc("net", "dev"))

    def collect(self) -> Iterable[Metric]:
        text = read_text(self.paths[0]) or read_text(self.paths[1])
        if text is None:
            raise FileNotFoundError(f"neither {self.paths[0]} nor {self.paths[1]} is readable")
        devices = parse_net_dev(text)
        keys = [f"receive_{k}" for k in RECEIVE_FIELDS] + [f"transmit_{k}" for k in TRANSMIT_FIELDS]
        for key in keys:
            family = CounterMetricFamily(
                f"node_network_{key}_total",
                f"Network device statistic {key}.",
                labels=["device"],
            )
            for device, counters in devices.items():
                family.add_metric([device], counters[key])
            yield family


class NetClassSource:
    """node_network_up, node_network_mtu_bytes and node_network_speed_bytes from /sys/class/net."""

    name = "netclass"

    def __init__(self, roots: Roots):
        self.base = roots.sys("class", "net")

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "node_network_up", "Value is 1 if operstate is 'up', 0 otherwise.", labels=["device"]
        )
        mtu = GaugeMetricFamily("node_network_mtu_bytes", "Network device MTU.", labels=["device"])
        speed = GaugeMetricFamily(
            "node_network_speed_bytes", "Network device link speed.", labels=["device"]
        )
        for device in list_dir(self.base):
            path = self.base / device
            state = read_value(path / "operstate")
            if state is not None:
                up.add_metric([device], 1.0 if state == "up" else 0.0)
            value = read_int(path / "mtu")
            if value is not None:
                mtu.add_metric([device], value)
            value = read_int(path / "speed")  # Mbit/s; -1 or unreadable when the link is down
            if value is not None and value >= 0:
                speed.add_metric([device], value * 125000)
        yield up
        yield mtu
        yield speed
