"""Append-only records and owners' settings, shown read-only: revisions, occurrences, status
changes, notification channels and attempts."""

from __future__ import annotations

from django.contrib import admin

from accounting.admin import ReadOnlyAdmin
from schedules.models import (
    NotificationAttempt,
    NotificationSettings,
    Occurrence,
    PauseEvent,
    ScheduleRevision,
)


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
