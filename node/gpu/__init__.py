"""The node's GPUs judged: NVIDIA's XID catalog and the health verdict of each GPU."""
