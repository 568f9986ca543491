"""`manage.py probe_fleet`: run one sweep now, in this process, and say what it found."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from healthcheck.state import get_redis, last_sweep
from healthcheck.tasks import probe_fleet

# Why probe_fleet did not sweep (its "reason"), in words for the operator.
NOT_RUN = {
    "running": "a sweep is already running; try again in a few seconds.",
    "lock lost": (
        "the sweep lost its lock before it could write (another sweep took over, or Redis "
        "dropped the lock): it probed but wrote nothing; try again."
    ),
}


class Command(BaseCommand):
    help = (
        "Probe every registered node once, now (the same sweep mac-beat schedules), "
        "unless a sweep is already running."
    )

    def handle(self, *args, **options):
        try:
            outcome = probe_fleet(force=True)
        except Exception as exc:  # Redis or the database down: say which, no traceback
            raise CommandError(f"the sweep could not run: {exc}") from None
        if not outcome["ran"]:
            reason = outcome.get("reason", "")
            raise CommandError(NOT_RUN.get(reason, f"the sweep did not run: {reason}."))
        stats = last_sweep(get_redis()) or {}
        self.stdout.write(
            f"Swept {outcome['nodes']} nodes in {outcome['duration']:.2f} s: "
            f"{stats.get('online', 0)} online, {stats.get('offline', 0)} offline, "
            f"{outcome['changed']} changed."
        )
