"""The Celery app of the master: Redis broker, tasks found in the Django apps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")

app = Celery("macweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
