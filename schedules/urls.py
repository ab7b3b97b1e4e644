"""The dashboard's URLs. Pages about runs, conversations and the budget keep the namespaces of
the app whose data they show (`runs:detail`, `accounting:budget`); config/urls.py mounts each
list under its namespace."""

from __future__ import annotations

from django.urls import URLPattern, path

from schedules.views import budget, conversations, owner_settings, requests, runs, schedules

app_name = "schedules"
urlpatterns: list[URLPattern] = [
    path("", schedules.schedule_list, name="list"),
    path("schedules/new/", schedules.schedule_create, name="create"),
    path("schedules/new/preview/", schedules.limits_preview, name="preview"),
    path("schedules/<int:pk>/", schedules.schedule_detail, name="detail"),
    path("schedules/<int:pk>/edit/", schedules.schedule_edit, name="edit"),
    path("schedules/<int:pk>/pause/", schedules.pause, name="pause"),
    path("schedules/<int:pk>/resume/", schedules.resume, name="resume"),
    path("schedules/<int:pk>/request-limits/", requests.request_limits, name="request_limits"),
    path("settings/", owner_settings.notification_settings, name="settings"),
    path("settings/rotate-secret/", owner_settings.rotate_webhook_secret, name="rotate_secret"),
    path("settings/test/", owner_settings.send_test_notification, name="test_notification"),
    path("settings/completions/", owner_settings.completion_settings, name="completion_settings"),
    path("settings/alerts/", owner_settings.alert_settings, name="alert_settings"),
    path("settings/chat/", owner_settings.chat_settings, name="chat_settings"),
    path("proposals/<int:pk>/confirm/", conversations.confirm_proposal, name="confirm_proposal"),
    path("proposals/<int:pk>/decline/", conversations.decline_proposal, name="decline_proposal"),
    path(
        "schedules/<int:pk>/completion-notices/",
        schedules.completion_notices,
        name="completion_notices",
    ),
]

# One path a line, as urlpatterns above: a table of routes, each its own.
run_urls: list[URLPattern] = [
    path("runs/<int:pk>/", runs.run_detail, name="detail"),
    path("runs/<int:pk>/writing/", runs.run_writing, name="writing"),
    path("runs/in-flight/", runs.runs_in_flight, name="in_flight"),
    path("conversations/", runs.conversation_list, name="conversations"),
    path("conversations/<int:pk>/delete/", runs.conversation_delete, name="delete_conversation"),
    path("conversations/new/", conversations.conversation_new, name="new_conversation"),
    path("conversations/<int:pk>/", conversations.conversation_detail, name="conversation"),
    path("conversations/<int:pk>/messages/", conversations.send_message, name="send_message"),
    path("runs/<int:pk>/cancel/", conversations.cancel_run, name="cancel"),
]

budget_urls: list[URLPattern] = [
    path("budget/", budget.budget, name="budget"),
]
