"""Owners' requests for new limits in the admin: the queue, oldest first, each with its replay;
deciding is pinning (the schedule's pin page, prefilled from the request) or declining with a
reason."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from accounting.admin import BigTableAdmin
from accounting.formatting import money_text
from schedules import services
from schedules.admin.common import PinLinks, labelled, utc_text
from schedules.forms import DeclineForm
from schedules.models import (
    RevisionRequest,
    revision_snapshot,
)
from schedules.selectors import diff


class RequestStateFilter(admin.SimpleListFilter):
    """Open requests by default: the queue an admin works through, oldest first."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*RevisionRequest.State.choices, ("all", "All")]

    def choices(self, changelist: Any) -> Any:
        for value, title in self.lookup_choices:
            yield {
                "selected": (self.value() or RevisionRequest.State.OPEN) == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or RevisionRequest.State.OPEN
        return queryset if value == "all" else queryset.filter(state=value)


@admin.register(RevisionRequest)
class RevisionRequestAdmin(PinLinks, BigTableAdmin):
    """Owners' requests for new limits: a queue, oldest first. Deciding is pinning (the pin page,
    prefilled from the request) or declining with a reason; both need the pin permission."""

    list_display = ("request", "owner", "asks_for", "state_words", "decided")
    list_display_links = ("request",)
    list_select_related = ("schedule__owner", "requested_by", "decided_by", "revision")
    list_filter = (RequestStateFilter,)
    ordering = ("created_at", "id")
    search_fields = ("schedule__title",)
    fields = (
        "schedule_link",
        "owner",
        "asked",
        "state_words",
        "decided",
        "limits_compared",
        "reason",
        "decision",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[RevisionRequest]:
        requests: QuerySet[RevisionRequest] = super().get_queryset(request)
        return requests.select_related("schedule__current_revision", "schedule__owner")  # for str()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # owners ask on their schedule's page or through the API

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # decided through the pin and decline pages, never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="request", ordering="created_at")
    def request(self, obj: RevisionRequest) -> SafeString:
        return format_html(
            '{}<span class="row-detail">asked {}</span>',
            obj.schedule.title,
            utc_text(obj.created_at, "short"),
        )

    @admin.display(description="owner")
    def owner(self, obj: RevisionRequest) -> str:
        return str(obj.schedule.owner)

    @admin.display(description="asks for")
    def asks_for(self, obj: RevisionRequest) -> str:
        limits = obj.run_limits
        return (
            f"{money_text(limits.max_cost)} per run (reserve {money_text(limits.synthesis_reserve_cost)}), "
            f"{limits.max_steps} steps, failure limit {obj.max_consecutive_failures}"
        )

    @admin.display(description="state", ordering="state")
    def state_words(self, obj: RevisionRequest) -> SafeString:
        return format_html('<span class="status status--{}">{}</span>', obj.state, obj.get_state_display())

    @admin.display(description="decided (UTC)")
    def decided(self, obj: RevisionRequest) -> str:
        if obj.decided_at is None:
            return "—"
        who = obj.decided_by.get_username() if obj.decided_by else "an admin"
        pinned = f" as revision {obj.revision.number}" if obj.revision else ""
        return f"{obj.get_state_display()}{pinned} by {who}, {utc_text(obj.decided_at, 'short')}"

    @admin.display(description="schedule")
    def schedule_link(self, obj: RevisionRequest) -> SafeString:
        url = reverse("admin:schedules_schedule_change", args=[obj.schedule_id])
        return format_html('<a href="{}">{}</a>', url, obj.schedule.title)

    @admin.display(description="asked (UTC)")
    def asked(self, obj: RevisionRequest) -> str:
        who = obj.requested_by.get_username() if obj.requested_by else "a deleted user"
        return f"{utc_text(obj.created_at)} by {who} via {obj.via}, against revision {obj.base_revision}"

    @admin.display(description="limits")
    def limits_compared(self, obj: RevisionRequest) -> SafeString:
        current = obj.schedule.revision
        changes = labelled(
            diff(
                revision_snapshot(current),
                {
                    **revision_snapshot(current),
                    **obj.limits,
                    "max_consecutive_failures": obj.max_consecutive_failures,
                },
            )
        )
        return render_to_string(
            "admin/schedules/_limits_table.html",
            {
                "limits": obj.run_limits,
                "failure_limit": obj.max_consecutive_failures,
                "changes": changes,
                "current": current,
            },
        )

    @admin.display(description="decision")
    def decision(self, obj: RevisionRequest) -> str:
        if obj.state == RevisionRequest.State.DECLINED:
            return f"Declined: {obj.decline_reason}"
        if obj.revision is not None:
            return f"Pinned as revision {obj.revision.number}: {obj.revision.reason}"
        return "Open: review and pin it, or decline it with a reason (the owner is told either way)."

    def get_urls(self) -> list[URLPattern]:
        decline = path(
            "<int:object_id>/decline/",
            self.admin_site.admin_view(self.decline_view),
            name="schedules_revisionrequest_decline",
        )
        return [decline, *super().get_urls()]

    def decline_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Decline an open request with a reason the owner is told. Only with the pin permission."""
        if not request.user.has_perm(services.PIN_PERMISSION):
            raise PermissionDenied
        asked = get_object_or_404(
            RevisionRequest.objects.select_related("schedule", "requested_by"), pk=object_id
        )
        back = redirect(reverse("admin:schedules_revisionrequest_change", args=[asked.pk]))
        if not asked.is_open:
            self.message_user(request, f"That request was already {asked.state}.", messages.WARNING)
            return back
        form = DeclineForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                services.decline_request(asked, form.parsed, by=request.user, via="admin")  # type: ignore[arg-type]
            except services.RequestDecided as exc:
                self.message_user(
                    request, f"The request was {exc.request.state} meanwhile.", messages.WARNING
                )
                return back
            self.message_user(
                request, f"Declined the request for “{asked.schedule.title}”; the owner is told."
            )
            return back
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Decline the request for “{asked.schedule.title}”",
            "asked": asked,
            "asked_when": utc_text(asked.created_at),
            "form": form,
        }
        return TemplateResponse(request, "admin/schedules/revisionrequest/decline.html", context)
