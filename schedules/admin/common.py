"""Shared by the admin's pages: every time in one zone (UTC), people's names for limit fields,
and django-q2's own admin made read-only."""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from typing import Any

from django.apps import apps
from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from accounting.admin import ReadOnlyAdmin
from accounting.formatting import local_text
from runs.limits import LIMIT_LABELS
from schedules import services
from schedules.forms import FAILURE_LIMIT_LABEL
from schedules.selectors import Change

UTC = zoneinfo.ZoneInfo("UTC")
REVISIONS_SHOWN = 20
FIELD_LABELS = {**LIMIT_LABELS, "max_consecutive_failures": FAILURE_LIMIT_LABEL}


def utc_text(moment: datetime | None, style: str = "full") -> str:
    """Every admin time in one zone: "2 Dec 2026, 08:07 UTC"."""
    return local_text(moment, UTC, style) if moment else "—"


def show_task_queue_read_only(site: admin.AdminSite) -> None:
    """Replace django-q2's admin, which edits a task's function and arguments and resubmits
    tasks outside our admission path, with read-only views of its periodic tasks and failures.
    The models come from the app registry: django_q is imported only by the tasks modules."""
    for name in ("Schedule", "Success", "Failure", "OrmQ"):
        model = apps.get_model("django_q", name)
        if site.is_registered(model):
            site.unregister(model)
    site.register(
        apps.get_model("django_q", "Schedule"),
        type(
            "QueueScheduleAdmin",
            (ReadOnlyAdmin,),
            {"list_display": ("name", "func", "schedule_type", "minutes", "next_run", "repeats")},
        ),
    )
    site.register(
        apps.get_model("django_q", "Failure"),
        type("QueueFailureAdmin", (ReadOnlyAdmin,), {"list_display": ("name", "func", "started", "stopped")}),
    )


show_task_queue_read_only(admin.site)


def labelled(changes: list[Change]) -> list[Change]:
    """A diff with people's names for the limit fields ("Max cost (USD)")."""
    return [
        Change(FIELD_LABELS.get(c.field, c.field.replace("_", " ").capitalize()), c.old, c.new)
        for c in changes
    ]


class PinLinks:
    """Change pages that offer the pin page's links only to staff with the pin permission."""

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {**(extra_context or {}), "can_pin": request.user.has_perm(services.PIN_PERMISSION)}
        response: HttpResponse = super().change_view(  # type: ignore[misc]
            request, object_id, form_url, extra_context=extra
        )
        return response
