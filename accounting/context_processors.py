from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from accounting.selectors import request_summary


def budget_headroom(request: HttpRequest) -> dict[str, Any]:
    """The signed-in owner's spend against today's and this month's ceilings, for the top bar.

    Lazy, so a page that does not show the top bar (an HTMX fragment, a poll) does not pay for it.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.path.startswith("/admin/"):
        return {}
    if getattr(request, "htmx", False):
        return {}
    return {"budget": SimpleLazyObject(lambda: request_summary(request))}
