"""The owner's settings: notification channels, the webhook's signing secret, a test notice, and
whether the assistant's schedules wait for confirmation."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounting import alerts, ledger
from config.http import HtmxRequest, owner_post
from schedules import notices, proposals, selectors
from schedules.forms import (
    AlertThresholdsForm,
    ChatSettingsForm,
    CompletionSettingsForm,
    NotificationSettingsForm,
)
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


def _channels_form(channels: NotificationSettings) -> NotificationSettingsForm:
    """The channels form as saved, for a page rendered after another of its forms was posted."""
    return NotificationSettingsForm(
        initial={
            "email_enabled": channels.email_enabled,
            "webhook_enabled": channels.webhook_enabled,
            "webhook_url": channels.webhook_url,
        }
    )


def _settings_page(
    request: HtmxRequest,
    form: NotificationSettingsForm,
    channels: NotificationSettings,
    secret: str,
    completion_form: CompletionSettingsForm | None = None,
    alert_form: AlertThresholdsForm | None = None,
) -> HttpResponse:
    attempts = selectors.notification_attempts(request.user.pk)
    context = {"form": form, "channels": channels, "secret": secret, "attempts": attempts}
    context["completion_form"] = completion_form or CompletionSettingsForm(
        initial={
            "completion_email": channels.completion_email,
            "completion_webhook": channels.completion_webhook,
            "webhook_content": channels.webhook_content,
            "completion_only_changed": channels.completion_only_changed,
        }
    )
    thresholds = alerts.thresholds_of(ledger.budget_for(request.user.pk))
    context["alert_form"] = alert_form or AlertThresholdsForm(
        initial={"thresholds": ", ".join(str(t) for t in thresholds)}
    )
    return render(request, "schedules/settings.html", context)


@require_POST
@login_required
def completion_settings(request: HtmxRequest) -> HttpResponse:
    """Whether the owner is told when a scheduled run completes, on which channels, and whether only
    when the answer changed."""
    form = CompletionSettingsForm(request.POST)
    if form.is_valid():  # four checkboxes: always valid
        channels = notices.completed.update_completion_settings(request.user, **form.cleaned_data)
        on = channels.completion_email or channels.completion_webhook
        changed = ", only when the answer changed" if channels.completion_only_changed else ""
        messages.success(
            request, f"Completion notices are on{changed}." if on else "Completion notices are off."
        )
    return redirect("schedules:settings")


@require_POST
@login_required
def rotate_webhook_secret(request: HtmxRequest) -> HttpResponse:
    secret = notices.rotate_webhook_secret(request.user)
    messages.success(request, "A new signing secret is in force; the old one no longer verifies.")
    channels = notices.settings_for(request.user.pk)
    return _settings_page(request, _channels_form(channels), channels, secret)


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


@owner_post
def chat_settings(request: HtmxRequest) -> HttpResponse:
    """Whether a schedule the assistant proposes in chat waits for the owner's confirmation
    (docs/contract.md#confirm-before-chat-creates-a-schedule). Idempotent."""
    form = ChatSettingsForm(request.POST)
    form.is_valid()  # one checkbox: always valid
    channels = proposals.set_confirmation(request.user, form.cleaned_data["confirm_chat_schedules"])
    notice = (
        "The assistant's schedules now wait for your confirmation."
        if channels.confirm_chat_schedules
        else "The assistant's schedules are now created at once, without asking you."
    )
    if request.htmx:
        context = {"channels": channels, "chat_notice": notice}
        return render(request, "schedules/_chat_settings.html", context)
    messages.success(request, notice)
    return redirect("schedules:settings")


@require_POST
@login_required
def alert_settings(request: HtmxRequest) -> HttpResponse:
    """The owner's alert thresholds (accounting.alerts); an invalid entry re-renders the page with its
    error on the field."""
    form = AlertThresholdsForm(request.POST)
    if form.is_valid():
        thresholds = alerts.set_thresholds(request.user.pk, form.parsed)
        words = ", ".join(f"{t} %" for t in thresholds)
        messages.success(request, f"Budget alerts at {words}." if thresholds else "Budget alerts are off.")
        return redirect("schedules:settings")
    channels = notices.settings_for(request.user.pk)
    return _settings_page(request, _channels_form(channels), channels, "", alert_form=form)
