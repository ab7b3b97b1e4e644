"""The owner's notification settings: channels, the webhook's signing secret, a test notice."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from config.http import HtmxRequest
from schedules import notices, selectors
from schedules.forms import CompletionSettingsForm, NotificationSettingsForm
from schedules.models import NotificationSettings


@require_http_methods(["GET", "POST"])
@login_required
def notification_settings(request: HtmxRequest) -> HttpResponse:
    channels = notices.settings_for(request.user.pk)
    initial = {"email_enabled": channels.email_enabled, "webhook_enabled": channels.webhook_enabled}
    form = NotificationSettingsForm(
        request.POST or None, initial={**initial, "webhook_url": channels.webhook_url}
    )
    secret = ""
    if request.method == "POST" and form.is_valid():
        try:
            channels, secret = notices.update_notification_settings(request.user, **form.cleaned_data)
        except notices.InvalidNotificationSettings as exc:
            form.add_field_errors(exc.fields)
        else:
            messages.success(request, "Notification settings saved.")
            if not secret:  # a new signing secret is shown on this response only
                return redirect("schedules:settings")
    return _settings_page(request, form, channels, secret)


def _settings_page(
    request: HtmxRequest,
    form: NotificationSettingsForm,
    channels: NotificationSettings,
    secret: str,
    completion_form: CompletionSettingsForm | None = None,
) -> HttpResponse:
    attempts = selectors.notification_attempts(request.user.pk)
    context = {"form": form, "channels": channels, "secret": secret, "attempts": attempts}
    context["completion_form"] = completion_form or CompletionSettingsForm(
        initial={
            "completion_email": channels.completion_email,
            "completion_webhook": channels.completion_webhook,
            "webhook_content": channels.webhook_content,
        }
    )
    return render(request, "schedules/settings.html", context)


@require_POST
@login_required
def completion_settings(request: HtmxRequest) -> HttpResponse:
    """Whether the owner is told when a scheduled run completes, on which channels."""
    form = CompletionSettingsForm(request.POST)
    if form.is_valid():  # three checkboxes: always valid
        channels = notices.completed.update_completion_settings(request.user, **form.cleaned_data)
        on = channels.completion_email or channels.completion_webhook
        messages.success(request, "Completion notices are on." if on else "Completion notices are off.")
    return redirect("schedules:settings")


@require_POST
@login_required
def rotate_webhook_secret(request: HtmxRequest) -> HttpResponse:
    secret = notices.rotate_webhook_secret(request.user)
    messages.success(request, "A new signing secret is in force; the old one no longer verifies.")
    channels = notices.settings_for(request.user.pk)
    form = NotificationSettingsForm(
        initial={
            "email_enabled": channels.email_enabled,
            "webhook_enabled": channels.webhook_enabled,
            "webhook_url": channels.webhook_url,
        }
    )
    return _settings_page(request, form, channels, secret)


@require_POST
@login_required
def send_test_notification(request: HtmxRequest) -> HttpResponse:
    attempts = notices.send_test_notification(request.user, attempts=1)
    if not attempts:
        messages.info(request, "Nothing was sent: turn on email or a webhook first.")
    for attempt in attempts:
        status = f" (HTTP {attempt.http_status})" if attempt.http_status else ""
        outcome = attempt.get_outcome_display().lower()
        text = f"Test {attempt.channel}: {outcome}{status}. {attempt.detail}".strip()
        ok = attempt.outcome == attempt.Outcome.DELIVERED
        messages.add_message(request, messages.SUCCESS if ok else messages.WARNING, text)
    return redirect("schedules:settings")
