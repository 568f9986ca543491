"""A simulated fleet: N fake agents on distinct loopback addresses, for tests, benchmarks, demos.

Each fake node owns one address 127.X.Y.Z and serves, on the contract's ports,
the liveness URL of each service it runs (sys-exporter `:29101/metrics` with a
small exposition made by prometheus_client, nic-exporter `:29500/metrics`, and
any other service of contract.services). Every port of every node can be
switched at run time to:

- answer: 200 and a valid body;
- refuse: nothing listens, the kernel answers RST (connection refused);
- hang: the connection is accepted and the request read, no answer ever comes;
- blackhole: SYNs are dropped, the client's connect times out. On loopback a
  packet cannot really be lost, so the port gets a listener with a backlog of 0
  whose single accept slot is taken by a connection nobody accepts; Linux drops
  every further SYN to a full accept queue, which is exactly what a dead host or a
  DROP firewall looks like from the client;
- bad_body: 200 with HTML instead of an exposition;
- http_500: an HTTP 500.

The servers are a minimal HTTP/1.1 responder on asyncio transports rather than
aiohttp.web: one answer per connection, a pre-rendered body, no per-request
task. 10,000 nodes must cost little CPU next to the master's sweep they are
measuring, on the same two cores.

With `profiles` (`--profiles` on the command line) the nodes are GPU and RDMA
machines instead: see testkit.simfleet.profiles and docs/probing.md.

Use from Python with `FleetThread` (a background event loop with synchronous
controls) or `SimFleet` inside a running loop; from the shell:

    python -m testkit.simfleet --nodes 100 --base 127.20.0.0 \
        [--register http://MASTER:28080 --token T] [--blackhole 0.1]

Each node needs one file descriptor per served port: at 10,000 nodes with two
services that is 20,000, so the soft RLIMIT_NOFILE is raised to the hard limit
and the command splits a larger fleet across processes (each its own --base slice).
"""

from testkit.simfleet.cli import pick, register_fleet
from testkit.simfleet.fleet import (
    DEFAULT_BASE,
    DEFAULT_SERVICES,
    FleetThread,
    Mode,
    Port,
    SimFleet,
    SimNode,
    hostname_for,
    loopback_base,
    node_addresses,
    render_exposition,
)
from testkit.simfleet.model import Fault
from testkit.simfleet.profiles import DEFAULT_MIX, PROFILES, Profile

__all__ = [
    "DEFAULT_BASE",
    "DEFAULT_MIX",
    "DEFAULT_SERVICES",
    "PROFILES",
    "Fault",
    "FleetThread",
    "Mode",
    "Port",
    "Profile",
    "SimFleet",
    "SimNode",
    "hostname_for",
    "loopback_base",
    "node_addresses",
    "pick",
    "register_fleet",
    "render_exposition",
]
