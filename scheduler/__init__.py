"""The scheduler app: MAC acting on and reading from the workload manager (Slurm).

Above `alerting` and `inventory` (it records drains in a node's history and raises
the drain-budget alert) and below `healthcheck` and `macweb` (the sweep and the pages
call it). `scheduler.slurm` is the client of Slurm's own tools and needs no Django; the
drain is `drain` (the decision, pure), `drainpass` (one pass after each sweep), `link`
(slurmctld's reachability and the backoff), `tasks`, `health` and `metrics`:
see docs/slurm.md.
"""
