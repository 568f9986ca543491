"""The MAC master's Django project: settings, URLs, ASGI/WSGI, the Celery app, the dashboard.

The Celery app loads with Django, as Celery's Django guide has it, so that
`probe_fleet.delay()` from any master process goes to MAC's Redis broker.
"""

from macweb.celery import app as celery_app

__all__ = ["celery_app"]
