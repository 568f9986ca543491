"""The Celery app of the master: Redis broker, tasks found in the Django apps, beat schedule."""

import os
from urllib.parse import urlsplit

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")

app = Celery("macweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
# kombu's Redis transport with a guard that keeps the worker alive across Redis
# restarts (macweb/broker.py); the broker URL stays redis://. Another broker
# (MAC_CELERY_BROKER_URL=sentinel://, amqp://...) keeps its own transport.
if urlsplit(app.conf.broker_url or "").scheme in {"redis", "rediss"}:
    app.conf.broker_transport = "macweb.broker:Transport"
app.autodiscover_tasks()

# The master's heartbeat: one fleet sweep per MAC_PROBE_INTERVAL. The expiry
# drops a sweep that could not start before the next one is due (flow 3: sweeps
# never pile up); healthcheck.tasks refuses overlaps and duplicates. A fleet larger than
# MAC_SWEEP_CHUNK_SIZE is swept by probe_chunk tasks, routed to MAC_PROBE_QUEUE by
# settings.CELERY_TASK_ROUTES (healthcheck.chunks).
app.conf.beat_schedule = {
    "probe-fleet": {
        "task": "healthcheck.tasks.probe_fleet",
        "schedule": settings.PROBE_INTERVAL,
        "options": {"expires": settings.PROBE_INTERVAL * 0.9},
    },
    # Job attribution: which Slurm job holds which GPU (scheduler.jobread); the task
    # does nothing where the master has no slurm.conf.
    "read-slurm-jobs": {
        "task": "scheduler.tasks.read_slurm_jobs",
        "schedule": settings.PROBE_INTERVAL,
        "options": {"expires": settings.PROBE_INTERVAL * 0.9},
    },
    # The dashboard's firing alerts, a failed reload retried, maintenance silences put
    # back (alerting.tasks).
    "sync-alertmanager": {
        "task": "alerting.tasks.sync_alertmanager",
        "schedule": settings.ALERT_POLL_INTERVAL,
        "options": {"expires": settings.ALERT_POLL_INTERVAL * 0.9},
    },
}
