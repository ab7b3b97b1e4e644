"""The JSON API for API clients (SPEC §8), served under /api/v1/ by django-ninja."""

from __future__ import annotations

from schedules.api import revision_requests  # noqa: F401  (registers its routes on `api`)
from schedules.api.routes import api

__all__ = ["api"]
