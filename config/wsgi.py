"""WSGI entry point (gunicorn config.wsgi, and runserver)."""

import logging
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from config.http import client_address_rule  # noqa: E402 - after Django is set up

# Said once per server process: which client address a lockout is keyed on (a wrong rule either
# locks everyone out behind a proxy or lets a client forge a new address per request).
logging.getLogger("config.wsgi").info(client_address_rule())
