"""MAC's agent side: the exporters, their shared runtime and the node's own checks.

Nothing in this package imports Django: it runs on agents without the master.
"""
