"""What the agent and the master share: the wire contract, and nothing else of MAC.

Ports and services, the node-key header, how a probe ends and what the pattern of
answers means, the blocking client of the master's API, atomic file writes, and the one
declaration of every setting (contract.settings).
Both sides import this package; it imports no other MAC package and no Django, so
an agent node needs neither the master's apps nor their dependencies.
"""

__version__ = "0.1.0"
