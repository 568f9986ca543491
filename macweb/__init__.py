"""The MAC master's Django project: settings, URLs, ASGI/WSGI, Celery and the mac CLI."""

__version__ = "0.1.0"
