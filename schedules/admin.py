from __future__ import annotations

from typing import Any

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from accounting.admin import BigTableAdmin, ChoicesFilter, ReadOnlyAdmin
from runs.admin import ProviderFilter
from runs.failures import ERROR_CLASS_CHOICES, Failure, Reason
from schedules import services, tokens
from schedules.forms import PinRevisionForm
from schedules.models import (
    ApiToken,
    NotificationAttempt,
    NotificationSettings,
    Occurrence,
    PauseEvent,
    Schedule,
    ScheduleRevision,
    revision_snapshot,
)
from schedules.selectors import Change, diff


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


class RevisionInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ScheduleRevision
    fields = (
        "number",
        "created_at",
        "path",
        "via",
        "created_by",
        "reason",
        "max_consecutive_failures",
        "limits",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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
    options = ERROR_CLASS_CHOICES
    lookup = "last_event__payload__failure__error_class"


class LastProviderFilter(ProviderFilter):
    title = "last failure provider"
    parameter_name = "last_provider"
    lookup = "last_event__payload__failure__provider"


@admin.register(Schedule)
class ScheduleAdmin(BigTableAdmin):
    list_display = (
        "title",
        "owner",
        "kind",
        "status",
        "pause_reason",
        "streak",
        "last_classification",
        "next_occurrence_at",
    )
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
    inlines = [RevisionInline]
    readonly_fields = (
        "owner",
        "title",
        "kind",
        "status",
        "consecutive_failures",
        "next_occurrence_at",
        "current_revision",
        "pause",
        "last_event",
        "created_at",
    )

    def has_pin_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(services.PIN_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules are created through the schedule.create policy (dashboard, chat, API)

    @admin.display(description="pause reason", ordering="pause__reason")
    def pause_reason(self, obj: Schedule) -> str:
        return obj.pause.get_reason_display() if obj.pause else "—"

    @admin.display(description="failures")
    def streak(self, obj: Schedule) -> str:
        limit = obj.current_revision.max_consecutive_failures if obj.current_revision else "?"
        return f"{obj.consecutive_failures} of {limit}"

    @admin.display(description="last run")
    def last_classification(self, obj: Schedule) -> str:
        event = obj.last_event
        if event is None:
            return "—"
        failure = Failure.from_payload(event.failure)
        return failure.long if failure else str(event.payload.get("status", ""))

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
        """An explicit revision: edit, review the diff, confirm. Only with the pin permission."""
        if not request.user.has_perm(services.PIN_PERMISSION):
            raise PermissionDenied
        schedule = get_object_or_404(
            Schedule.objects.select_related("current_revision__agent", "owner"), pk=object_id
        )
        current = schedule.revision
        if request.method != "POST":
            return self._pin_page(
                request, schedule, PinRevisionForm(initial=PinRevisionForm.initial_for(current))
            )
        form = PinRevisionForm(request.POST)
        if "edit" in request.POST or not form.is_valid():
            return self._pin_page(request, schedule, form)
        stale = form.cleaned_data.get("base_revision") != current.number
        if "confirm" not in request.POST or stale:
            # Review against the revision in force now; confirming then pins on top of it.
            form = _rebased(form, current)
            return self._pin_page(request, schedule, form, changes=_pin_diff(current, form), stale=stale)
        try:
            revision = services.pin_revision(
                schedule,
                form.parsed,
                by=request.user,  # type: ignore[arg-type]
                via="admin",
                expected_number=current.number,
            )
        except services.ScheduleCompleted:
            self.message_user(
                request, "The schedule completed meanwhile; nothing was pinned.", messages.WARNING
            )
            return redirect(reverse("admin:schedules_schedule_change", args=[schedule.pk]))
        except services.RevisionChanged:
            # Someone pinned, edited or completed it between the review and the click: review again.
            schedule.refresh_from_db()
            form = _rebased(form, schedule.revision)
            return self._pin_page(
                request, schedule, form, changes=_pin_diff(schedule.revision, form), stale=True
            )
        self.message_user(
            request, f"Pinned revision {revision.number} of “{schedule.title}”.", messages.SUCCESS
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
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Pin a revision of “{schedule.title}”",
            "schedule": schedule,
            "current": schedule.revision,
            "form": form,
            "reviewing": changes is not None,
            "changes": changes or [],
            "stale": stale,
        }
        return TemplateResponse(request, "admin/schedules/schedule/pin.html", context)


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
    rebased = PinRevisionForm(data)
    assert rebased.is_valid()  # the same values validated a moment ago
    return rebased


def _pin_diff(current: ScheduleRevision, form: PinRevisionForm) -> list[Change]:
    """What the explicit revision changes against the revision in force."""
    proposed = {
        **revision_snapshot(current),
        **form.parsed.limits.to_json(),
        "max_consecutive_failures": form.parsed.max_consecutive_failures,
    }
    return diff(revision_snapshot(current), proposed)


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
