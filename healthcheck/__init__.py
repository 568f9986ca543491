"""The sweep: probes, statuses, diagnoses, the targets it writes, /health, /metrics."""
