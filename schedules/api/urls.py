"""Mounted at /api/v1/ by config/urls.py. The namespace is the API's: "api"."""

from __future__ import annotations

from schedules.api import api

urlpatterns, _, app_name = api.urls
