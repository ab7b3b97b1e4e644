"""The Django admin, reading like the dashboard: statuses and failures in words, limits as a table,
revisions numbered with their diffs, and every time in one zone, UTC (the admin's TIME_ZONE).
Explicit revisions (pin) and decisions on revision requests are extra pages (get_urls +
admin_view) that call the services."""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from typing import Any

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from accounting.admin import BigTableAdmin, ChoicesFilter, ReadOnlyAdmin
from accounting.formatting import local_text, money_text
from runs.admin import ProviderFilter
from runs.failures import ERROR_CLASS_WORDS, Failure, Reason
from runs.limits import LIMIT_LABELS
from schedules import selectors, services, tokens
from schedules.forms import FAILURE_LIMIT_LABEL, DeclineForm, PinRevisionForm
from schedules.models import (
    ApiToken,
    NotificationAttempt,
    NotificationSettings,
    Occurrence,
    PauseEvent,
    RevisionRequest,
    Schedule,
    ScheduleRevision,
    revision_snapshot,
)
from schedules.selectors import Change, diff

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


# SPEC §6: an admin, who may pause and resume anyone's schedule, is staff with the pin permission.
@admin.action(description="Pause selected schedules", permissions=["pin"])
def pause(modeladmin: ScheduleAdmin, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    done = 0
    for schedule in queryset:
        try:
            services.pause_schedule(schedule, by=request.user)  # type: ignore[arg-type]
            done += 1
        except services.NotActive:
            pass
    modeladmin.message_user(
        request, f"Paused {done} of {queryset.count()} schedule(s); the rest were not active."
    )


@admin.action(description="Resume selected schedules (failure counts are kept)", permissions=["pin"])
def resume(modeladmin: ScheduleAdmin, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    done = 0
    for schedule in queryset:
        try:
            services.resume_schedule(schedule, by=request.user)  # type: ignore[arg-type]
            done += 1
        except services.NotPaused:
            pass
    modeladmin.message_user(
        request, f"Resumed {done} of {queryset.count()} schedule(s); the rest were not paused."
    )


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
class ScheduleAdmin(BigTableAdmin):
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
                "changes": _labelled(diff(revision_snapshot(revisions[i + 1]), revision_snapshot(revision)))
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

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {**(extra_context or {}), "can_pin": request.user.has_perm(services.PIN_PERMISSION)}
        return super().change_view(request, object_id, form_url, extra_context=extra)

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
        }
        return TemplateResponse(request, "admin/schedules/schedule/pin.html", context)


def _answering(request: HttpRequest, schedule: Schedule) -> RevisionRequest | None:
    """The revision request a pin answers (`request` in the query or the form), or None; 404
    when it is not a request of this schedule."""
    value = request.POST.get("request") or request.GET.get("request") or ""
    if not value:
        return None
    if not value.isdigit() or len(value) > 18:
        raise Http404("No such request.")
    return get_object_or_404(
        RevisionRequest.objects.select_related("requested_by"), pk=int(value), schedule=schedule
    )


def _initial(answering: RevisionRequest, current: ScheduleRevision) -> dict[str, Any]:
    """The pin form prefilled from an owner's request, reviewed against the revision in force."""
    who = answering.requested_by.get_username() if answering.requested_by else "the owner"
    return {
        **PinRevisionForm.values_of(answering.limits, answering.max_consecutive_failures),
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


def _labelled(changes: list[Change]) -> list[Change]:
    """A diff with people's names for the limit fields ("Max cost (USD)")."""
    return [
        Change(FIELD_LABELS.get(c.field, c.field.replace("_", " ").capitalize()), c.old, c.new)
        for c in changes
    ]


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
class RevisionRequestAdmin(BigTableAdmin):
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
        changes = _labelled(
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

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {**(extra_context or {}), "can_pin": request.user.has_perm(services.PIN_PERMISSION)}
        return super().change_view(request, object_id, form_url, extra_context=extra)

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


@admin.register(ScheduleRevision)
class ScheduleRevisionAdmin(ReadOnlyAdmin):
    list_display = (
        "schedule",
        "number",
        "created_at",
        "path",
        "via",
        "created_by",
        "max_consecutive_failures",
    )
    list_select_related = ("schedule", "created_by")
    list_filter = ("path",)
    ordering = ("-id",)


@admin.register(Occurrence)
class OccurrenceAdmin(ReadOnlyAdmin):
    list_display = ("schedule", "scheduled_for", "outcome", "revision", "run")
    list_select_related = ("schedule", "revision", "run")
    list_filter = ("outcome",)
    ordering = ("-id",)


@admin.register(PauseEvent)
class PauseEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "schedule",
        "action",
        "reason",
        "actor",
        "failures_at_event",
        "failure_limit",
        "run_id",
    )
    list_select_related = ("schedule", "actor")
    list_filter = ("action", "reason")
    ordering = ("-id",)


class ApiTokenForm(forms.ModelForm):  # type: ignore[type-arg]
    """A new token: for yourself (a superuser may choose anyone), with scopes its user holds."""

    scopes = forms.MultipleChoiceField(choices=ApiToken.Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiToken
        fields = ("user", "name", "scopes")

    by: Any = None  # who is asking; set per request by ApiTokenAdmin.get_form

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("user") is not None and cleaned.get("scopes"):
            try:
                tokens.check_token_request(cleaned["user"], list(cleaned["scopes"]), by=self.by)
            except (tokens.InvalidScopes, tokens.NotYours) as exc:
                self.add_error("scopes" if isinstance(exc, tokens.InvalidScopes) else "user", str(exc))
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("user",)
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        """Your own tokens; a superuser sees everyone's."""
        tokens_ = super().get_queryset(request)
        return tokens_ if request.user.is_superuser else tokens_.filter(user_id=request.user.pk)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiTokenForm
        form = super().get_form(request, obj, change=change, **kwargs)
        form.by = request.user  # type: ignore[attr-defined]  # a class made for this request
        return form

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = User.objects.filter(pk=request.user.pk or 0)
            kwargs["initial"] = request.user.pk
            kwargs["help_text"] = "A token is yours; only a superuser may create one for another user."
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("user", "name", "scopes")
        return ("user", "name", "scopes", "prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ()
        return ("user", "name", "scopes", "prefix", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        token, secret = tokens.create_api_token(
            form.cleaned_data["user"],
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            by=request.user,  # type: ignore[arg-type]
        )
        obj.pk = token.pk
        obj.refresh_from_db()
        messages.warning(
            request, f"Copy this token now; it is not stored and will not be shown again: {secret}"
        )

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        return self.response_post_save_add(request, obj)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = sum(tokens.revoke_api_token(token) for token in queryset)
        self.message_user(request, f"Revoked {revoked} token(s).")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead, so last use stays visible


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
    }
    return _labelled(diff(revision_snapshot(current), proposed))


@admin.register(NotificationSettings)
class NotificationSettingsAdmin(ReadOnlyAdmin):
    """Owners set their channels (the URL rules and the signing secret live on their settings
    page); here they are visible."""

    list_display = ("owner", "email_enabled", "webhook_enabled", "webhook_url", "webhook_disabled_at")
    list_select_related = ("owner",)
    # The signing secret is the owner's: never shown here, rotated from the owner's settings page.
    fields = (
        "owner",
        "email_enabled",
        "webhook_enabled",
        "webhook_url",
        "webhook_failures",
        "webhook_disabled_at",
        "webhook_disabled_reason",
    )


@admin.register(NotificationAttempt)
class NotificationAttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "owner",
        "schedule",
        "channel",
        "attempt",
        "outcome",
        "http_status",
        "is_test",
    )
    list_select_related = ("owner", "schedule")
    list_filter = ("channel", "outcome", "is_test")
    show_full_result_count = False
