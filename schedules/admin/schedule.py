"""Schedules in the admin, reading like the dashboard: status and the last run's failure in
words, limits as a table, revisions numbered with their diffs; read-only, except for the pin page
(an explicit revision, get_urls + admin_view) and the pause and resume actions, which call the
services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from accounting.admin import BigTableAdmin, ChoicesFilter
from accounting.money import format_money
from accounting.numbers import whole_number
from runs.admin import ProviderFilter
from runs.failures import ERROR_CLASS_WORDS, Failure, Reason
from schedules import selectors, services
from schedules.admin.common import REVISIONS_SHOWN, PinLinks, labelled, utc_text
from schedules.forms import PinRevisionForm
from schedules.models import (
    PauseEvent,
    RevisionRequest,
    Schedule,
    ScheduleRevision,
    revision_snapshot,
)
from schedules.selectors import Change, diff


# docs/contract.md#people-and-permissions: an admin, who may pause and resume anyone's schedule, is staff
# with the pin permission.
@admin.action(description="Pause selected schedules", permissions=["pin"])
def pause(modeladmin: ScheduleAdmin, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    done = _each(queryset, services.pause_schedule, services.NotActive, by=request.user)
    modeladmin.message_user(
        request, f"Paused {done} of {queryset.count()} schedule(s); the rest were not active."
    )


@admin.action(description="Resume selected schedules (failure counts are kept)", permissions=["pin"])
def resume(modeladmin: ScheduleAdmin, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    done = _each(
        queryset, services.resume_schedule, (services.NotPaused, services.ScheduleLimit), by=request.user
    )
    modeladmin.message_user(
        request,
        f"Resumed {done} of {queryset.count()} schedule(s); the rest were not paused, or their owner "
        "already has as many active schedules as allowed.",
    )


def _each(
    queryset: QuerySet[Schedule],
    transition: Callable[..., Schedule],
    skipped: type[Exception] | tuple[type[Exception], ...],
    *,
    by: Any,
) -> int:
    """Apply a status transition to each schedule; those not in its starting state are skipped
    (the service's compare-and-swap says so). Returns how many changed."""
    done = 0
    for schedule in queryset:
        try:
            transition(schedule, by=by)
            done += 1
        except skipped:
            pass
    return done


class PauseReasonFilter(ChoicesFilter):
    title = "pause reason"
    parameter_name = "pause_reason"
    options = tuple(PauseEvent.Reason.choices)
    lookup = "pause__reason"


# The last run's classification is read from the newest schedule.run_accounted (last_event), so
# these filters work after the run itself was deleted with its conversation.
class LastFailureReasonFilter(ChoicesFilter):
    title = "last failure reason"
    parameter_name = "last_failure_reason"
    options = tuple(Reason.choices)
    lookup = "last_event__payload__failure__reason"


class LastErrorClassFilter(ChoicesFilter):
    title = "last error class"
    parameter_name = "last_error_class"
    options = ERROR_CLASS_WORDS
    lookup = "last_event__payload__failure__error_class"


class LastProviderFilter(ProviderFilter):
    title = "last failure provider"
    parameter_name = "last_provider"
    lookup = "last_event__payload__failure__provider"


@admin.register(Schedule)
class ScheduleAdmin(PinLinks, BigTableAdmin):
    # Four columns that read at 1280 px with the navigation open (admin.css lays them out as
    # cards on a phone): the title with its owner and kind, the status in words with the failure
    # count, the last run's classification, and the next run in UTC.
    list_display = ("schedule", "status_words", "last_classification", "next_run")
    list_display_links = ("schedule",)
    list_select_related = ("owner", "current_revision", "pause", "last_event")
    list_filter = (
        "status",
        PauseReasonFilter,
        LastFailureReasonFilter,
        LastErrorClassFilter,
        LastProviderFilter,
        "kind",
    )
    search_fields = ("title",)
    actions = [pause, resume]
    # Read-only: schedules change through their services (the owner's edit, a pin, a pause), so
    # the change page offers no Save and no Delete.
    fieldsets = (
        (None, {"fields": ("owner", "title", "definition", "status_words", "next_run", "created")}),
        ("Limits in force", {"fields": ("limits_table",)}),
        ("Revisions", {"fields": ("revision_history",)}),
        ("Requests for new limits", {"fields": ("request_list",)}),
    )
    readonly_fields = (
        "owner",
        "title",
        "definition",
        "status_words",
        "next_run",
        "created",
        "limits_table",
        "revision_history",
        "request_list",
    )

    def has_pin_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(services.PIN_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules are created through the schedule.create policy (dashboard, chat, API)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nothing here is edited in place; see the fieldsets

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a schedule is paused, not deleted: deleting drops its revisions and audit

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        waiting = RevisionRequest.objects.filter(schedule=OuterRef("pk"), state=RevisionRequest.State.OPEN)
        schedules: QuerySet[Schedule] = super().get_queryset(request)
        return schedules.annotate(has_open_request=Exists(waiting))

    @admin.display(description="schedule", ordering="title")
    def schedule(self, obj: Schedule) -> SafeString:
        return format_html(
            '{}<span class="row-detail">{} · {}</span>', obj.title, obj.owner, obj.get_kind_display().lower()
        )

    @admin.display(description="status", ordering="status")
    def status_words(self, obj: Schedule) -> SafeString:
        """ "Paused" over "failure limit · 2 of 2 failures" (and "limits requested")."""
        detail = [obj.pause.get_reason_display()] if obj.pause else []
        detail.append(f"{self.streak(obj)} failures")
        if getattr(obj, "has_open_request", False):
            detail.append("limits requested")
        return format_html(
            '<span class="status status--{}">{}</span><span class="row-detail">{}</span>',
            obj.status,
            obj.get_status_display(),
            " · ".join(detail),
        )

    @admin.display(description="failures")
    def streak(self, obj: Schedule) -> str:
        limit = obj.current_revision.max_consecutive_failures if obj.current_revision else "?"
        return f"{obj.consecutive_failures} of {limit}"

    @admin.display(description="last run")
    def last_classification(self, obj: Schedule) -> SafeString | str:
        event = obj.last_event
        if event is None:
            return "—"
        failure = Failure.from_payload(event.failure)
        if failure is None:
            return str(event.payload.get("status", ""))
        status = f"HTTP {failure.http_status}" if failure.http_status else ""
        detail = " · ".join(p for p in (failure.transience, status, failure.provider_code) if p)
        return format_html('{}<span class="row-detail">{}</span>', failure.reason_words, detail)

    @admin.display(description="agent and cadence")
    def definition(self, obj: Schedule) -> str:
        """ "sim-expensive · Every Monday at 08:00, Europe/Riga" (the prompt is the owner's content)."""
        revision = obj.revision
        return f"{revision.agent.name} · {revision.cadence}"

    @admin.display(description="next run (UTC)", ordering="next_occurrence_at")
    def next_run(self, obj: Schedule) -> str:
        return utc_text(obj.next_occurrence_at, "short")

    @admin.display(description="created")
    def created(self, obj: Schedule) -> str:
        return utc_text(obj.created_at)

    @admin.display(description="limits")
    def limits_table(self, obj: Schedule) -> SafeString:
        revision = obj.revision
        return render_to_string(
            "admin/schedules/_limits_table.html",
            {
                "limits": revision.run_limits,
                "failure_limit": revision.max_consecutive_failures,
                "revision": revision,
            },
        )

    @admin.display(description="history")
    def revision_history(self, obj: Schedule) -> SafeString:
        revisions = list(
            obj.revisions.select_related("created_by", "agent", "request__requested_by").order_by("-number")[
                : REVISIONS_SHOWN + 1
            ]
        )
        entries = [
            {
                "revision": revision,
                "when": utc_text(revision.created_at),
                "changes": labelled(diff(revision_snapshot(revisions[i + 1]), revision_snapshot(revision)))
                if i + 1 < len(revisions)
                else [],
                "first": revision.number == 1,
            }
            for i, revision in enumerate(revisions[:REVISIONS_SHOWN])
        ]
        return render_to_string(
            "admin/schedules/_revisions.html", {"entries": entries, "more": len(revisions) > REVISIONS_SHOWN}
        )

    @admin.display(description="requests")
    def request_list(self, obj: Schedule) -> SafeString:
        requests = selectors.schedule_requests(obj)
        return render_to_string(
            "admin/schedules/_requests.html",
            {"requests": [(r, utc_text(r.created_at), utc_text(r.decided_at)) for r in requests]},
        )

    # -- pin a revision ----------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        pin = path(
            "<int:object_id>/pin/",
            self.admin_site.admin_view(self.pin_view),
            name="schedules_schedule_pin",
        )
        return [pin, *super().get_urls()]

    def pin_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """An explicit revision: edit, review the diff and what it would have done to the last
        runs, confirm. Only with the pin permission. With `request=<id>`, it answers that open
        revision request: prefilled from it, and pinned through services.pin_from_request."""
        if not request.user.has_perm(services.PIN_PERMISSION):
            raise PermissionDenied
        schedule = get_object_or_404(
            Schedule.objects.select_related("current_revision__agent", "owner"), pk=object_id
        )
        current = schedule.revision
        answering = _answering(request, schedule)
        if answering is not None and not answering.is_open:
            self.message_user(request, f"That request was already {answering.state}.", messages.WARNING)
            return redirect(reverse("admin:schedules_revisionrequest_change", args=[answering.pk]))
        if request.method != "POST":
            initial = (
                PinRevisionForm.initial_for(current) if answering is None else _initial(answering, current)
            )
            form = PinRevisionForm(initial=initial, current=current)
            return self._pin_page(request, schedule, form, answering=answering)
        form = PinRevisionForm(request.POST, current=current)
        if "edit" in request.POST or not form.is_valid():
            return self._pin_page(request, schedule, form, answering=answering)
        stale = form.cleaned_data.get("base_revision") != current.number
        if "confirm" not in request.POST or stale:
            # Review against the revision in force now; confirming then pins on top of it.
            form = _rebased(form, current)
            changes = _pin_diff(current, form)
            return self._pin_page(request, schedule, form, changes=changes, stale=stale, answering=answering)
        try:
            revision = _pin(request, schedule, form, answering, expected_number=current.number)
        except services.ScheduleCompleted:
            self.message_user(
                request, "The schedule completed meanwhile; nothing was pinned.", messages.WARNING
            )
            return redirect(reverse("admin:schedules_schedule_change", args=[schedule.pk]))
        except services.RevisionChanged:
            # Someone pinned, edited or completed it between the review and the click: review again.
            schedule.refresh_from_db()
            form = _rebased(form, schedule.revision)
            changes = _pin_diff(schedule.revision, form)
            return self._pin_page(request, schedule, form, changes=changes, stale=True, answering=answering)
        except services.RequestDecided as exc:
            decided = exc.request
            self.message_user(
                request, f"The request was {decided.state} meanwhile; nothing was pinned.", messages.WARNING
            )
            return redirect(reverse("admin:schedules_revisionrequest_change", args=[decided.pk]))
        answered = f", answering the request of {utc_text(answering.created_at)}" if answering else ""
        self.message_user(
            request, f"Pinned revision {revision.number} of “{schedule.title}”{answered}.", messages.SUCCESS
        )
        return redirect(reverse("admin:schedules_schedule_change", args=[schedule.pk]))

    def _pin_page(
        self,
        request: HttpRequest,
        schedule: Schedule,
        form: PinRevisionForm,
        *,
        changes: list[Change] | None = None,
        stale: bool = False,
        answering: RevisionRequest | None = None,
    ) -> HttpResponse:
        reviewing = changes is not None
        report = (
            selectors.replay_report(selectors.recorded_runs(schedule), form.parsed.limits)
            if reviewing
            else None
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Pin a revision of “{schedule.title}”",
            "schedule": schedule,
            "current": schedule.revision,
            "current_when": utc_text(schedule.revision.created_at),
            "form": form,
            "reviewing": reviewing,
            "changes": changes or [],
            "stale": stale,
            "answering": answering,
            "asked_when": utc_text(answering.created_at) if answering else "",
            "report": report,
            "rows": [(row, utc_text(row.run.scheduled_for, "short")) for row in report.rows]
            if report
            else [],
            "cap_months": selectors.cap_replay(
                schedule, form.parsed.monthly_cap, form.parsed.limits.max_cost, "UTC"
            )
            if reviewing
            else [],
        }
        return TemplateResponse(request, "admin/schedules/schedule/pin.html", context)


def _answering(request: HttpRequest, schedule: Schedule) -> RevisionRequest | None:
    """The revision request a pin answers (`request` in the query or the form), or None; 404
    when it is not a request of this schedule."""
    value = request.POST.get("request") or request.GET.get("request") or ""
    if not value:
        return None
    pk = whole_number(value)
    if pk is None:
        raise Http404("No such request.")
    return get_object_or_404(RevisionRequest.objects.select_related("requested_by"), pk=pk, schedule=schedule)


def _initial(answering: RevisionRequest, current: ScheduleRevision) -> dict[str, Any]:
    """The pin form prefilled from an owner's request, reviewed against the revision in force."""
    who = answering.requested_by.get_username() if answering.requested_by else "the owner"
    return {
        **PinRevisionForm.values_of(
            answering.limits, answering.max_consecutive_failures, answering.monthly_cap
        ),
        "base_revision": current.number,
        "request": answering.pk,
        "reason": f"Requested by {who}: {answering.reason}"[:1000],
    }


def _pin(
    request: HttpRequest,
    schedule: Schedule,
    form: PinRevisionForm,
    answering: RevisionRequest | None,
    *,
    expected_number: int,
) -> ScheduleRevision:
    by: Any = request.user  # a signed-in staff user: admin_view lets no one else through
    if answering is not None:
        return services.pin_from_request(
            answering, form.parsed, by=by, via="admin", expected_number=expected_number
        )
    return services.pin_revision(schedule, form.parsed, by=by, via="admin", expected_number=expected_number)


def _rebased(form: PinRevisionForm, current: ScheduleRevision) -> PinRevisionForm:
    data = {name: form.data.get(name, "") for name in form.fields}
    data["base_revision"] = str(current.number)
    rebased = PinRevisionForm(data, current=current)
    assert rebased.is_valid()  # the same values validated a moment ago
    return rebased


def _pin_diff(current: ScheduleRevision, form: PinRevisionForm) -> list[Change]:
    """What the explicit revision changes against the revision in force."""
    proposed = {
        **revision_snapshot(current),
        **form.parsed.limits.to_json(),
        "max_consecutive_failures": form.parsed.max_consecutive_failures,
        "monthly_cap": format_money(form.parsed.monthly_cap)
        if form.parsed.monthly_cap is not None
        else "none",
    }
    return labelled(diff(revision_snapshot(current), proposed))
