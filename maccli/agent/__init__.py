"""`mac start|stop|restart|status agent`: the node's services and its registration.

Join (flow 1): MASTER_IP, the master's /health, the services, then a synchronous
POST /api/v1/register whose per-node key is kept in the root-only per-node file.
Leave (flow 8): deregister first, then stop; a master that does not answer leaves
the node registered, and `mac` says so.

One concern a module:

| module | what |
|---|---|
| specs | the agent services, their ports and the runtime that runs them |
| guards | configuration that must be right before anything starts |
| hardware | what the node has (GPUs, NICs, machine id), through the exporters' discovery |
| payload | the registration body |
| errors | the master's refusals as errors that say what to do next |
| registration | the conversation with the master: health, register, deregister, self |
| commands | the four commands |
"""

from maccli.agent.commands import restart, start, status, stop
from maccli.agent.specs import agent_specs

__all__ = ["agent_specs", "restart", "start", "status", "stop"]
