from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

# django-q2's own admin can edit a task's function and arguments and resubmit tasks outside our
# admission path; its models are shown read-only instead.
from django_q import models as q_models

from accounting.admin import ReadOnlyAdmin
from schedules import services, tokens
from schedules.models import ApiToken, Occurrence, PauseEvent, Schedule, ScheduleRevision

for _model in (q_models.Schedule, q_models.Success, q_models.Failure, q_models.OrmQ):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


@admin.register(q_models.Schedule)
class QueueScheduleAdmin(ReadOnlyAdmin):
    list_display = ("name", "func", "schedule_type", "minutes", "next_run", "repeats")


@admin.register(q_models.Failure)
class QueueFailureAdmin(ReadOnlyAdmin):
    list_display = ("name", "func", "started", "stopped")
    show_full_result_count = False


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


@admin.action(description="Pause selected schedules", permissions=["change"])
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


@admin.action(description="Resume selected schedules (failure counts are kept)", permissions=["change"])
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


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("title", "owner", "kind", "status", "pause_reason", "streak", "next_occurrence_at")
    list_select_related = ("owner", "current_revision", "pause")
    list_filter = ("status", "kind", "pause__reason")
    search_fields = ("title",)
    show_full_result_count = False
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules are created through the schedule.create policy (dashboard, chat, API)

    @admin.display(description="pause reason", ordering="pause__reason")
    def pause_reason(self, obj: Schedule) -> str:
        return obj.pause.get_reason_display() if obj.pause else "—"

    @admin.display(description="failures")
    def streak(self, obj: Schedule) -> str:
        limit = obj.current_revision.max_consecutive_failures if obj.current_revision else "?"
        return f"{obj.consecutive_failures} of {limit}"


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
    list_filter = ("path", "via")
    show_full_result_count = False


@admin.register(Occurrence)
class OccurrenceAdmin(ReadOnlyAdmin):
    list_display = ("schedule", "scheduled_for", "outcome", "revision", "run")
    list_select_related = ("schedule", "revision")
    list_filter = ("outcome",)
    show_full_result_count = False


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
    show_full_result_count = False


class ApiTokenForm(forms.ModelForm):  # type: ignore[type-arg]
    scopes = forms.MultipleChoiceField(choices=ApiToken.Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiToken
        fields = ("user", "name", "scopes")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("user",)
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiTokenForm
        return super().get_form(request, obj, change=change, **kwargs)

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
            form.cleaned_data["user"], name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"]
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
