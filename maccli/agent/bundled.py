"""The agent's Python services as one process under the process runtime, one row each.

Why: the Python exporters of a node run as one process (exporters.bundle) so that
the whole agent fits in 150 MB, but everything around the runtime speaks per service:
`mac status` lists each with its own health, registration sends each one's port,
`mac doctor` checks each. BundledRuntime sits between the agent commands and the
runtime: it hands the runtime the one process (ServiceSpec `exporters`) in place of
its members, and turns the process's state back into one row per member, whose
health is that member's own liveness URL. The runtime itself needs no notion of it.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from maccli.output import CliError, spinner
from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState, probe
from maccli.runtimes.ports import check_port_free

BUNDLE_NAME = "exporters"
# What probe() says when nothing answers at all (no HTTP status came back).
_SILENT = ("refused", "timeout", "unreachable")


class BundledRuntime(Runtime):
    """`inner` runs `bundle`, the one process that serves the services `members`."""

    def __init__(
        self,
        inner: Runtime,
        bundle: ServiceSpec,
        members: Sequence[ServiceSpec],
        poll: float = 0.2,
    ) -> None:
        self.inner = inner
        self.bundle = bundle
        self.members = list(members)
        self.poll = poll
        self.name = inner.name

    def runtime_specs(self, specs: Sequence[ServiceSpec]) -> list[ServiceSpec]:
        """`specs` with the members replaced, where the first of them was, by the bundle."""
        names = {member.name for member in self.members}
        folded: list[ServiceSpec] = []
        for spec in specs:
            if spec.name not in names:
                folded.append(spec)
            elif self.bundle not in folded:
                folded.append(self.bundle)
        return folded

    def start(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        folded = self.runtime_specs(specs)
        if self.bundle in folded and not self.inner.status(role, [self.bundle])[0].running:
            # The runtime checks the bundle's one port; each member needs its own free.
            for member in self.members:
                check_port_free(role, member)
        states = self.inner.start(role, folded)
        if self.bundle in folded:
            self._wait_members(role)
        return self.unfold(states)

    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        return self.unfold(self.inner.stop(role, self.runtime_specs(specs)))

    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        return self.unfold(self.inner.status(role, self.runtime_specs(specs)))

    def restart(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        self.stop(role, specs)
        return self.start(role, specs)

    def stop_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        # A member's own process is the bundle: its every member stops with it.
        return self.unfold(self.inner.stop_services(role, self.runtime_specs(specs)))

    def start_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        folded = self.runtime_specs(specs)
        states = self.inner.start_services(role, folded)
        if any(state.name == self.bundle.name and state.running for state in states):
            self._wait_members(role)
        return self.unfold(states)

    def has_state(self, role: str) -> bool:
        return self.inner.has_state(role)

    def logs(
        self,
        role: str,
        service: str,
        lines: int | None,
        follow: bool,
        *,
        shared: Sequence[str] = (),
    ) -> int:
        # A member's lines are in the bundle's log.
        return self.inner.logs(role, service, lines, follow, shared=(*shared, self.bundle.name))

    def read_file(self, role: str, service: str, path: Path) -> bytes:
        return self.inner.read_file(role, service, path)

    def unfold(self, states: list[ServiceState]) -> list[ServiceState]:
        """One row per member in place of the bundle's, each with its own health."""
        rows: list[ServiceState] = []
        for state in states:
            if state.name != self.bundle.name:
                rows.append(state)
                continue
            healths = self._probe_members() if state.running else {}
            rows += [
                replace(
                    state,
                    name=member.name,
                    port=member.port,
                    health=healths.get(member.name, "-"),
                )
                for member in self.members
            ]
        return rows

    def _probe_members(self) -> dict[str, str]:
        with concurrent.futures.ThreadPoolExecutor(len(self.members)) as pool:
            answers = pool.map(lambda m: probe(m.liveness_url), self.members)
            return {m.name: answer for m, answer in zip(self.members, answers, strict=True)}

    def _wait_members(self, role: str) -> None:
        """Each member's port answers (any HTTP status: a failed build answers 503)."""
        if self.bundle.ready_timeout <= 0:
            return  # MAC_START_TIMEOUT=0: `mac start` does not wait (docs/settings.md)
        deadline = time.monotonic() + self.bundle.ready_timeout
        pending = list(self.members)
        with spinner(f"Waiting for {', '.join(m.name for m in pending)} ..."):
            while pending:
                pending = [m for m in pending if probe(m.liveness_url, 1.0) in _SILENT]
                if not pending:
                    return
                if time.monotonic() > deadline:
                    raise CliError(
                        f"{', '.join(m.name for m in pending)} did not answer within "
                        f"{self.bundle.ready_timeout:g} s ({pending[0].liveness_url}); "
                        f"they run in the {self.bundle.name} process.",
                        hint="Its log says why:",
                        commands=[f"mac logs {pending[0].name}", f"mac status {role}"],
                    )
                time.sleep(self.poll)
