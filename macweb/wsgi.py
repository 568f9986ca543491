"""WSGI entry point, for management tools; the server runs the ASGI app."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
application = get_wsgi_application()
