"""Alerts that reach people: notification channels, Alertmanager's configuration,
maintenance silences, and the firing alerts the dashboard and /health read.

Above `inventory` (it reads nodes) and below `healthcheck` and `macweb` (which read it):
see docs/alerts.md.
"""
