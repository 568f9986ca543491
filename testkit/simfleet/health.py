"""The GPU verdicts a simulated node serves: the agent's own judge over the model's state.

The simulated exporters judge their GPUs with node.gpu.health, the very code the real
dcgm-exporter and rocm-exporter run, fed with readings built from the node's faults
(testkit.simfleet.profiles) instead of NVML's or amdsmi's answers, and write the result
with exporters.gpu_health's families under the real exporters' labels. The page is
rendered again only when a verdict, the boot or the host name changed, so 10,000
healthy nodes cost a comparison each per scrape.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.core import Metric

from exporters.amd import LABELS as AMD_LABELS
from exporters.gpu_health import verdict_families
from exporters.nvidia import HEALTH_LABELS as NVIDIA_LABELS
from node.gpu.health import AmdReading, GpuJudge, NvidiaReading
from testkit.simfleet.hardware import HOST, TOKEN, amd_identities, nvidia_identities


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class SimVerdicts:
    """One simulated node's judge, its GPUs' identities, and its last rendered verdicts."""

    def __init__(self, vendor: str, count: int, token: str, window: float) -> None:
        self.vendor = vendor
        self.window = window
        self.judge = GpuJudge(window)
        identities = nvidia_identities(count) if vendor == "nvidia" else amd_identities(count)
        self.identities = [[value.replace(TOKEN, token) for value in ids] for ids in identities]
        self.labels = NVIDIA_LABELS if vendor == "nvidia" else AMD_LABELS
        self._rendered: tuple[tuple, bytes] | None = None

    def identity(self, gpu: int) -> tuple[str, str]:
        """(UUID, serial) of one GPU."""
        ids = self.identities[gpu]
        return (ids[1], ids[-1]) if self.vendor == "nvidia" else (ids[1], ids[3])

    def xid(self, gpu: int, code: int, at: float) -> None:
        self.judge.xid(gpu, code, at)

    def reboot(self) -> None:
        """A fresh exporter after a reboot: it remembers no event."""
        self.judge = GpuJudge(self.window)
        self._rendered = None

    def page(
        self, hostname: str, readings: list[NvidiaReading | AmdReading], boot_id: str, now: float
    ) -> bytes:
        """The verdict families of the GPUs read now (a GPU not read is missing)."""
        judged = [
            self.judge.nvidia(r, now) if isinstance(r, NvidiaReading) else self.judge.amd(r, now)
            for r in readings
        ]
        key = (hostname, boot_id, tuple(judged))
        if self._rendered is not None and self._rendered[0] == key:
            return self._rendered[1]
        labelled = [
            ([value.replace(HOST, hostname) for value in self.identities[int(v.index)]], v)
            for v in judged
        ]
        page = generate_latest(_Families(verdict_families(labelled, self.labels, boot_id)))
        self._rendered = (key, page)
        return page
