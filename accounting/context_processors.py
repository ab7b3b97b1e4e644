from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from accounting import ledger


def budget_headroom(request: HttpRequest) -> dict[str, Any]:
    """The signed-in owner's spend against today's and this month's ceilings, for the top bar."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.path.startswith("/admin/"):
        return {}
    return {"budget": ledger.summarize(int(user.pk))}
