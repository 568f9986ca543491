"""The healthcheck app's one table: the fencing token of the sweep allowed to write.

A sweep holds a Redis lock (healthcheck.state) while it runs, but a lock with a
time-out can be lost without its holder noticing: the holder stalls past the TTL,
Redis restarts, and another sweep starts. Checking the lock before writing leaves a
gap between the check and the commit. The fence closes it inside the database:
healthcheck.fence issues every sweep a token from this row, and the sweep's write
updates the row, in its own transaction, only while the stored token is not newer
than its own; otherwise the whole write rolls back.
"""

from django.db import models


class SweepFence(models.Model):
    """One row: the fencing token of the newest sweep (see the module docstring)."""

    token = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "sweep fence"

    def __str__(self) -> str:
        return f"sweep fence {self.token}"
