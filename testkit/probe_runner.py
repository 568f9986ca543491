"""Run the master's probe from the command line and move its results as JSON.

`python -m testkit.probe_runner ADDR...` probes agents exactly as the sweep does and
prints the results; the network-namespace tests run it inside the master namespace
and read the results back with probes_from_json. Test tooling, never imported by MAC.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict

from contract.liveness import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    NodeProbe,
    ProbeResult,
    Target,
    run_probe,
)
from contract.outcomes import Outcome
from contract.services import BY_NAME


def _result_json(result: ProbeResult) -> dict:
    found = asdict(result)
    if result.answer is not None:  # a GPU exporter's verdict answer: bytes, kept byte for byte
        found["answer"] = result.answer.decode("latin-1")
    return found


def probes_to_json(nodes: list[NodeProbe]) -> list[dict]:
    return [
        {
            "node_id": node.node_id,
            "ip": node.ip,
            "results": {name: _result_json(result) for name, result in node.results.items()},
        }
        for node in nodes
    ]


def probes_from_json(rows: list[Mapping]) -> list[NodeProbe]:
    """The inverse of probes_to_json (results of a probe run in another namespace)."""
    nodes = []
    for row in rows:
        node = NodeProbe(int(row["node_id"]), str(row["ip"]))
        for name, result in row["results"].items():
            node.results[name] = ProbeResult(
                service=result["service"],
                outcome=Outcome(result["outcome"]),
                http_status=result["http_status"],
                detail=result["detail"],
                elapsed=float(result["elapsed"]),
                attempts=int(result.get("attempts", 1)),
                answer=None if result.get("answer") is None else result["answer"].encode("latin-1"),
                cut=bool(result.get("cut", False)),
            )
        nodes.append(node)
    return nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.probe_runner",
        description="Probe agents the way the master's sweep does and print JSON results.",
    )
    parser.add_argument("addresses", nargs="+", help="agent addresses (node ids are 1..N)")
    parser.add_argument(
        "--exporters",
        default="",
        help="comma-separated service names the agents reported (sys and nic are always probed)",
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    args = parser.parse_args(argv)
    reported = tuple(name for name in args.exporters.split(",") if name)
    unknown = [name for name in reported if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown service {unknown[0]!r}; known: {', '.join(sorted(BY_NAME))}")
    targets = [Target(i, ip, reported) for i, ip in enumerate(args.addresses, start=1)]
    nodes = run_probe(targets, timeout=args.timeout, concurrency=args.concurrency)
    json.dump(probes_to_json(nodes), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
