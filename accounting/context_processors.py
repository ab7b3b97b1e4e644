from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from accounting.models import BudgetAlert
from accounting.selectors import request_alerts, request_summary


def budget_headroom(request: HttpRequest) -> dict[str, Any]:
    """The signed-in owner's spend against today's and this month's ceilings, for the top bar.

    Lazy, so a page that does not show the top bar (an HTMX fragment, a poll) does not pay for it.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.path.startswith("/admin/"):
        return {}
    if getattr(request, "htmx", False):
        return {}
    return {
        "budget": SimpleLazyObject(lambda: request_summary(request)),
        "budget_alert": SimpleLazyObject(lambda: _highest_alert(request)),
    }


class _NoAlert:
    def __bool__(self) -> bool:
        return False


def _highest_alert(request: HttpRequest) -> BudgetAlert | _NoAlert:
    """The highest threshold crossed in the current day or month (accounting.alerts), for the top bar
    until its period ends; a falsy stand-in when none is (a lazy object cannot wrap None)."""
    found = request_alerts(request)
    return found[0] if found else _NoAlert()
