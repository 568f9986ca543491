"""nic-exporter: RDMA bandwidth of every RDMA NIC, whatever its vendor, as one family.

Where the bytes come from depends on the NIC:

* NVIDIA Mellanox (mlx5) and MangoBoost GPUBoost: ``ethtool -S <iface>`` RDMA
  counters (mlx5: ``{rx,tx}_vport_rdma_{unicast,multicast}_bytes``);
* Broadcom Thor2 (BCM57608, bnxt_re): ``/sys/class/infiniband/<ibdev>/ports/1/
  hw_counters/{rx,tx}_bytes``;
* anything else with an IB device: the standard port counters
  ``port_{rcv,xmit}_data``, which count 4-byte words, not bytes.

All of it lands in ``rdma_{rx,tx}_bytes_total{device,port,vendor,iface}``, with the
link state and rate beside it. Each device is read on its own: one odd device
never hides the others. ``ethtool -S`` blocks while the kernel's RTNL lock is held
(a firmware reset, a link flap), so every interface's ethtool runs at once and waits
at most ETHTOOL_TIMEOUT, well under the collector's deadline: a slow NIC loses its
bytes for that scrape (``mac_nic_device_ok`` 0 and a warning naming it), the others
are still reported. The error and congestion counters of the same ports are
``node_infiniband_*`` (exporters.infiniband).

``device`` is always the verbs device as /sys/class/infiniband and node_exporter
name it (mlx5_0, bnxt_re0), ``iface`` the interface; a NIC without a verbs device
(GPUBoost through ethtool alone) has no ``device`` label.

The devices and their sysfs counters come from the node's one walk of sysfs
(node.hardware), the same that mango-sdk-agent, `mac doctor`'s RDMA check and the
registration use; this module only turns them into metrics.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporters.runtime import BackendStatus, Exporter, Options
from node.hardware import RdmaDevice, RdmaPort, discover_rdma_devices, read_port_counters
from node.host import Roots, read_int

log = logging.getLogger("exporters")

MLX5_RDMA = {
    "rx": ("rx_vport_rdma_unicast_bytes", "rx_vport_rdma_multicast_bytes"),
    "tx": ("tx_vport_rdma_unicast_bytes", "tx_vport_rdma_multicast_bytes"),
}
# GPUBoost names its RDMA byte counters <dir>_rdma_..._bytes / rdma_<dir>_bytes.
MANGOBOOST_RDMA = {
    "rx": re.compile(r"^(rx_(\w+_)?rdma(_\w+)?_bytes|rdma_rx_bytes)$"),
    "tx": re.compile(r"^(tx_(\w+_)?rdma(_\w+)?_bytes|rdma_tx_bytes)$"),
}
EthtoolRunner = Callable[[str], str]
# Well under the collectors' 5 s deadline (exporters.runtime): all interfaces wait together,
# so one blocked ethtool costs its own device and leaves time for the rest of the scrape.
ETHTOOL_TIMEOUT = 2.0


class EthtoolTimeout(RuntimeError):
    """``ethtool -S`` did not answer in time (RTNL held by a reset or a link flap)."""

    def __init__(self, iface: str, timeout: float):
        super().__init__(
            f"ethtool -S {iface} did not answer within {timeout:g}s (RTNL lock held by a"
            " firmware reset or a link flap?); its RDMA bytes are left out this scrape"
        )


def run_ethtool(iface: str, timeout: float = ETHTOOL_TIMEOUT) -> str:
    """``ethtool -S <iface>``; raises RuntimeError with ethtool's own message on failure."""
    proc = subprocess.Popen(
        ["ethtool", "-S", iface], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        # Not subprocess.run: it waits for the killed child, and one asleep in the kernel
        # on the RTNL lock dies only once it gets the lock. A thread reaps it then.
        threading.Thread(target=_reap, args=(proc,), daemon=True).start()
        raise EthtoolTimeout(iface, timeout) from None
    if proc.returncode != 0:
        raise RuntimeError(f"ethtool -S {iface}: {stderr.strip() or proc.returncode}")
    return stdout


def _reap(proc: subprocess.Popen) -> None:
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """Parse ``ethtool -S`` output into name -> value (per-queue lines keep their [n]: prefix)."""
    stats: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.rpartition(":")
        if not sep or not key.strip() or key.strip() == "NIC statistics":
            continue
        try:
            stats[key.strip()] = int(value.strip())
        except ValueError:
            continue
    return stats


def rdma_bytes_from_ethtool(vendor: str, stats: dict[str, int]) -> dict[str, int] | None:
    """RDMA rx/tx bytes for a Mellanox or MangoBoost NIC's ethtool stats; None if absent."""
    result = {}
    for direction in ("rx", "tx"):
        if vendor == "mellanox":
            keys = [key for key in MLX5_RDMA[direction] if key in stats]
        else:
            keys = [key for key in stats if MANGOBOOST_RDMA[direction].match(key)]
        if not keys:
            return None
        result[direction] = sum(stats[key] for key in keys)
    return result


class RdmaSource:
    """rdma_{rx,tx}_bytes_total plus link state and rate, per device and port."""

    name = "rdma"

    def __init__(
        self,
        roots: Roots,
        ethtool: EthtoolRunner | None = None,
        ethtool_timeout: float = ETHTOOL_TIMEOUT,
    ):
        self.roots = roots
        self.ethtool_timeout = ethtool_timeout
        self.ethtool = ethtool or functools.partial(run_ethtool, timeout=ethtool_timeout)
        self._default_ethtool = ethtool is None
        self._backends: list[BackendStatus] = []
        # An ethtool call still running from an earlier scrape is waited on, not started
        # again: a blocked interface holds one thread, not one per scrape.
        self._running: dict[str, concurrent.futures.Future] = {}

    def backends(self) -> list[BackendStatus]:
        return self._backends

    @staticmethod
    def _uses_ethtool(dev: RdmaDevice) -> bool:
        return dev.vendor in ("mellanox", "mangoboost") and bool(dev.iface)

    def _read_ethtool(self, ifaces: list[str]) -> dict[str, concurrent.futures.Future]:
        """Every interface's ``ethtool -S`` at once, waited on for ethtool_timeout in all."""
        futures: dict[str, concurrent.futures.Future] = {}
        if not ifaces:
            return futures
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, len(ifaces)), thread_name_prefix="ethtool"
        )
        for iface in dict.fromkeys(ifaces):
            running = self._running.get(iface)
            if running is None or running.done():
                running = self._running[iface] = pool.submit(self.ethtool, iface)
            futures[iface] = running
        # A little past the runner's own timeout: starting the processes takes time too.
        concurrent.futures.wait(futures.values(), timeout=self.ethtool_timeout + 0.5)
        pool.shutdown(wait=False)
        return futures

    def _ethtool_stats(self, future: concurrent.futures.Future, iface: str) -> dict[str, int]:
        if not future.done():
            raise EthtoolTimeout(iface, self.ethtool_timeout)
        return parse_ethtool_stats(future.result())

    def _port_bytes(
        self,
        dev: RdmaDevice,
        port: RdmaPort,
        ethtool: dict[str, concurrent.futures.Future],
    ) -> tuple[int, int]:
        """(rx, tx) bytes for one port, from the source that fits the vendor."""
        if self._uses_ethtool(dev):
            try:
                stats = self._ethtool_stats(ethtool[dev.iface], dev.iface)
            except EthtoolTimeout:
                # No sysfs fallback for one scrape: switching a port's counter source and
                # back would read as a counter reset and a bandwidth spike.
                raise
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                # The sysfs counters below still tell the bandwidth; say why ethtool did not.
                log.warning("nic %s: %s; falling back to sysfs counters", dev.iface, exc)
            else:
                found = rdma_bytes_from_ethtool(dev.vendor, stats)
                if found is not None:
                    return found["rx"], found["tx"]
        counters = read_port_counters(self.roots, dev.device, port.port) if dev.device else None
        if counters is not None:
            return counters.rx_bytes, counters.tx_bytes
        raise LookupError(
            f"{dev.device or dev.iface} port {port.port}: no RDMA byte counters found"
        )

    def collect(self) -> Iterable[Metric]:
        labels = ["device", "port", "vendor", "iface"]
        rx = CounterMetricFamily("rdma_rx_bytes_total", "RDMA bytes received.", labels=labels)
        tx = CounterMetricFamily("rdma_tx_bytes_total", "RDMA bytes transmitted.", labels=labels)
        up = GaugeMetricFamily(
            "rdma_link_up", "1 when the RDMA port is ACTIVE (or has carrier).", labels=labels
        )
        state_id = GaugeMetricFamily(
            "rdma_link_state_id",
            "IB port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
            labels=labels,
        )
        rate = GaugeMetricFamily(
            "rdma_link_rate_bytes_per_second", "Negotiated port rate.", labels=labels
        )
        ok = GaugeMetricFamily(
            "mac_nic_device_ok",
            "1 when the device's counters were read this scrape, 0 when its source failed.",
            labels=["device", "vendor", "iface"],
        )
        devices = discover_rdma_devices(self.roots)
        ethtool = self._read_ethtool([dev.iface for dev in devices if self._uses_ethtool(dev)])
        for dev in devices:
            device_ok = True
            for port in dev.ports:
                values = [dev.device, port.port, dev.vendor, dev.iface]
                if port.state_id is not None:
                    state_id.add_metric(values, port.state_id)
                    up.add_metric(values, 1.0 if port.state == "ACTIVE" else 0.0)
                elif dev.iface:
                    carrier = read_int(self.roots.sys("class", "net", dev.iface, "carrier"))
                    if carrier is not None:
                        up.add_metric(values, float(carrier))
                if port.rate_bytes_per_second is not None:
                    rate.add_metric(values, port.rate_bytes_per_second)
                try:
                    rx_bytes, tx_bytes = self._port_bytes(dev, port, ethtool)
                except (OSError, RuntimeError, LookupError, subprocess.SubprocessError) as exc:
                    device_ok = False
                    log.warning("nic %s port %s: %s", dev.device or dev.iface, port.port, exc)
                    continue
                rx.add_metric(values, rx_bytes)
                tx.add_metric(values, tx_bytes)
            ok.add_metric([dev.device, dev.vendor, dev.iface], 1.0 if device_ok else 0.0)
        self._backends = self._backend_status(devices)
        yield from (rx, tx, up, state_id, rate, ok)

    def _backend_status(self, devices: list[RdmaDevice]) -> list[BackendStatus]:
        statuses = [
            BackendStatus(
                "rdma",
                bool(devices),
                "" if devices else f"no RDMA devices under {self.roots.sys('class', 'infiniband')}",
            )
        ]
        if any(dev.vendor in ("mellanox", "mangoboost") for dev in devices):
            found = not self._default_ethtool or shutil.which("ethtool") is not None
            statuses.append(
                BackendStatus("ethtool", found, "" if found else "ethtool not found in PATH")
            )
        return statuses


def build(options: Options) -> Exporter:
    # Imported here: exporters.infiniband reads the same sysfs tree through this module.
    from exporters.infiniband import InfinibandSource

    return Exporter(
        "nic-exporter",
        [
            # Room left under a shorter --timeout for the sysfs reads and the other devices.
            RdmaSource(options.roots, ethtool_timeout=min(ETHTOOL_TIMEOUT, options.timeout / 2)),
            InfinibandSource(options.roots),
        ],
        timeout=options.timeout,
    )
