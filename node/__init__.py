"""The node's own configuration, read by the `mac` command and by every exporter.

Where a node keeps its settings (the layered env files of `mac env`), how they are
read and written, and how the agent runs the system's commands. Agent side, no
Django: `maccli` and `exporters` both import it; it imports only `contract`.
"""
