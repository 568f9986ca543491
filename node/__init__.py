"""The node itself: its configuration, its host and hardware, and the doctor's checks.

Where a node keeps its settings (the layered env files of `mac env`), how the agent
runs the system's commands, how it reads the host (node.host) and finds its hardware
(node.hardware), and the checks of `mac doctor` (node.checks). Agent side, no
Django: `maccli` and `exporters` both import it; it imports only `contract`.
"""
