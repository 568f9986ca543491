"""MAC's agent side: the exporters and their shared runtime: the node's readings into metrics.

Nothing in this package imports Django: it runs on agents without the master. The node's
own checks, readers and hardware discovery are node/'s.
"""
