"""The request type the owner's views receive: signed in (login_required) and with django-htmx's
`request.htmx`."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails
    user: User  # login_required: never anonymous here
