"""The JSON API for API clients (docs/contract.md#json-api), served under /api/v1/ by django-ninja."""

from __future__ import annotations

# Imported for their routes, which they register on `api`.
from schedules.api import conversations, revision_requests  # noqa: F401
from schedules.api.routes import api

__all__ = ["api"]
