"""A schedule that pauses itself tells its owner once, after the pause commits, on each channel."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from django.db import transaction
from django_q.models import OrmQ

from schedules import notifications, services, tasks
from schedules.models import NotificationAttempt, PauseEvent
from tests.factories import fail, make_agent, make_schedule, materialize, run_due

pytestmark = pytest.mark.django_db

MARKER = "QUOKKA-PRIVATE-4471"


@pytest.fixture
def owner(owner):
    owner.email = "olga@example.com"
    owner.save()
    return owner


def enable_webhook(owner, url: str) -> str:
    _, secret = notifications.update_notification_settings(
        owner, email_enabled=True, webhook_enabled=True, webhook_url=url
    )
    return secret


def pause_tasks() -> list[int]:
    return [
        task.task["args"][0]
        for task in OrmQ.objects.all()
        if task.task["func"] == "schedules.tasks.notify_pause"
    ]


def trip_failure_limit(owner, agent, django_capture_on_commit_callbacks):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    with django_capture_on_commit_callbacks(execute=True):
        fail(materialize(schedule))
    return schedule


def test_a_failure_limit_pause_notifies_once_per_channel_after_commit(
    owner, agent, mailoutbox, webhook_server, django_capture_on_commit_callbacks
):
    secret = enable_webhook(owner, webhook_server.url)
    schedule = trip_failure_limit(owner, agent, django_capture_on_commit_callbacks)

    (event_id,) = pause_tasks()
    assert event_id == schedule.pause_events.get(action="pause").pk
    tasks.notify_pause(event_id)
    tasks.notify_pause(event_id)  # a second delivery of the same task sends nothing

    assert len(mailoutbox) == 1
    assert mailoutbox[0].to == ["olga@example.com"]
    assert mailoutbox[0].subject == "Paused: Morning briefing"
    assert len(webhook_server.received) == 1
    body = webhook_server.received[0].json
    assert body["event"] == "schedule.paused" and body["reason"] == "failure_limit"
    assert (body["consecutive_failures"], body["max_consecutive_failures"]) == (2, 2)
    assert [f["reason"] for f in body["failures"]] == ["budget_exhausted", "budget_exhausted"]
    assert body["schedule"]["url"].endswith(f"/schedules/{schedule.pk}/")
    assert "after 2 consecutive failed runs" in body["summary"]
    rows = NotificationAttempt.objects.filter(schedule=schedule).order_by("channel")
    assert [(r.channel, r.outcome) for r in rows] == [("email", "delivered"), ("webhook", "delivered")]
    # The signature verifies with the owner's secret, over the exact body.
    received = webhook_server.received[0]
    expected = "sha256=" + hmac.new(secret.encode(), received.body, hashlib.sha256).hexdigest()
    assert received.headers[notifications.SIGNATURE_HEADER] == expected


def test_a_rolled_back_pause_sends_nothing(owner, agent, django_capture_on_commit_callbacks):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    occurrence = materialize(schedule)

    def pause_then_roll_back() -> None:
        with transaction.atomic():
            fail(occurrence)
            raise RuntimeError("the pause does not commit")

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        pause_then_roll_back()
    assert pause_tasks() == []
    assert not PauseEvent.objects.exists()


def test_resume_and_owner_pauses_send_nothing(owner, agent, django_capture_on_commit_callbacks):
    schedule = make_schedule(owner, agent)
    with django_capture_on_commit_callbacks(execute=True):
        services.pause_schedule(schedule, by=owner)
        services.resume_schedule(schedule, by=owner)
    assert pause_tasks() == []
    owner_pause = PauseEvent.objects.filter(action="pause").get()
    assert notifications.deliver_pause_notice(owner_pause.pk) == []


def test_an_invalid_definition_pause_notifies_with_its_reason(
    owner, agent, mailoutbox, django_capture_on_commit_callbacks
):
    schedule = make_schedule(owner, agent)
    with django_capture_on_commit_callbacks(execute=True):
        services.pause_for_invalid_definition(schedule, detail="its agent 'x' is retired")
    (event_id,) = pause_tasks()
    tasks.notify_pause(event_id)
    assert "could not be run as defined: its agent 'x' is retired" in mailoutbox[0].body


def test_the_message_carries_no_prompt_or_provider_message(
    owner, mailoutbox, webhook_server, django_capture_on_commit_callbacks
):
    enable_webhook(owner, webhook_server.url)
    schedule = make_schedule(owner, make_agent(model="sim-bad-param"), prompt=f"Summarise {MARKER} please")
    run_due(schedule)
    with django_capture_on_commit_callbacks(execute=True):
        last = run_due(schedule)
    assert MARKER in last.failure_message  # the provider echoed the prompt into its message
    tasks.notify_pause(pause_tasks()[0])
    sent = mailoutbox[0].subject + mailoutbox[0].body + webhook_server.received[0].body.decode()
    assert MARKER not in sent and "Summarise" not in sent and "Invalid content" not in sent
    assert "invalid_request_error" in sent and "400" in sent  # the classification is there


def test_admission_refusals_and_lost_workers_are_classified_like_any_failure(
    owner, agent, mailoutbox, django_capture_on_commit_callbacks
):
    from decimal import Decimal

    from accounting import ledger
    from runs.failures import WorkerLost

    schedule = make_schedule(owner, agent)
    fail(materialize(schedule), WorkerLost("no heartbeat"))
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = Decimal("1.00")
    budget.save()
    with django_capture_on_commit_callbacks(execute=True):
        run_due(schedule)  # refused: USD 5 does not fit under USD 1
    tasks.notify_pause(pause_tasks()[0])
    body = mailoutbox[0].body
    assert "admission denied" in body
    assert "worker lost" in body
    assert "Failures counted: 2 of 2." in body


class TestWebhookDelivery:
    def notify(self, owner, agent, django_capture_on_commit_callbacks, **kwargs):
        trip_failure_limit(owner, agent, django_capture_on_commit_callbacks)
        return notifications.deliver_pause_notice(pause_tasks()[0], sleep=lambda s: None, **kwargs)

    def test_a_500_then_200_is_retried_and_delivered_once(
        self, owner, agent, webhook_server, django_capture_on_commit_callbacks
    ):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(500, 0), (200, 0)]
        attempts = self.notify(owner, agent, django_capture_on_commit_callbacks)
        webhook = [(a.attempt, a.outcome, a.http_status) for a in attempts if a.channel == "webhook"]
        assert webhook == [(1, "retrying", 500), (2, "delivered", 200)]
        assert len(webhook_server.received) == 2
        assert webhook_server.received[0].body == webhook_server.received[1].body

    def test_a_410_is_permanent_and_not_retried(
        self, owner, agent, webhook_server, django_capture_on_commit_callbacks
    ):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(410, 0)]
        attempts = self.notify(owner, agent, django_capture_on_commit_callbacks)
        webhook = [(a.attempt, a.outcome, a.http_status) for a in attempts if a.channel == "webhook"]
        assert webhook == [(1, "failed", 410)]
        assert len(webhook_server.received) == 1
        assert any(a.channel == "email" and a.outcome == "delivered" for a in attempts)  # unaffected

    def test_a_slow_endpoint_times_out_within_the_timeout(
        self, owner, agent, webhook_server, monkeypatch, django_capture_on_commit_callbacks
    ):
        monkeypatch.setattr(notifications, "WEBHOOK_TIMEOUT_SECONDS", 0.5)
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(200, 3.0)] * 3
        trip_failure_limit(owner, agent, django_capture_on_commit_callbacks)
        started = time.monotonic()
        attempts = notifications.deliver_pause_notice(pause_tasks()[0], sleep=lambda s: None)
        elapsed = time.monotonic() - started
        webhook = [(a.outcome, a.http_status) for a in attempts if a.channel == "webhook"]
        assert webhook == [("retrying", None), ("retrying", None), ("failed", None)]
        assert elapsed < 3 * 0.5 + 1.5  # three attempts, each cut off at the timeout
        assert "transient: No response from the provider (timeout" in attempts[-1].detail
        schedule = attempts[-1].schedule
        assert schedule.status == "paused"  # a failing webhook changes nothing about the schedule

    def test_repeated_permanent_failures_turn_the_webhook_off_with_a_note(
        self, owner, agent, webhook_server, django_capture_on_commit_callbacks
    ):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(404, 0)] * 5
        for _ in range(notifications.DISABLE_AFTER_PERMANENT_FAILURES):
            notifications.send_test_notification(owner, sleep=lambda s: None)
        channels = notifications.settings_for(owner.pk)
        assert channels.webhook_disabled_at is not None
        assert "3 permanent failures in a row (last: HTTP 404)" in channels.webhook_disabled_reason
        assert not channels.webhook_active
        notifications.send_test_notification(owner, sleep=lambda s: None)
        assert len(webhook_server.received) == 3  # no more posts once it is off
        channels, _ = notifications.update_notification_settings(
            owner, email_enabled=True, webhook_enabled=True, webhook_url=webhook_server.url + "?v=2"
        )
        assert channels.webhook_active  # saving a corrected URL turns it back on


def test_the_test_notification_reaches_a_local_endpoint(owner, mailoutbox, webhook_server):
    secret = enable_webhook(owner, webhook_server.url)
    attempts = notifications.send_test_notification(owner)
    assert {(a.channel, a.outcome, a.is_test) for a in attempts} == {
        ("email", "delivered", True),
        ("webhook", "delivered", True),
    }
    received = webhook_server.received[0]
    assert received.json["test"] is True
    assert received.headers[notifications.SIGNATURE_HEADER] == notifications.sign(secret, received.body)


@pytest.mark.parametrize(
    ("url", "production", "error"),
    [
        ("ftp://example.com/hook", False, "absolute https:// URL"),
        ("not a url", False, "absolute https:// URL"),
        ("http://example.com/hook", False, "must use https://"),
        ("http://localhost:9000/hook", True, "must use https://"),
        ("https://user:pw@example.com/hook", False, "user name or password"),
    ],
)
def test_a_bad_webhook_url_is_refused_with_a_field_error(owner, settings, url, production, error):
    settings.PRODUCTION = production
    with pytest.raises(notifications.InvalidNotificationSettings) as refused:
        notifications.update_notification_settings(
            owner, email_enabled=True, webhook_enabled=True, webhook_url=url
        )
    assert error in refused.value.fields["webhook_url"]


def test_http_to_localhost_is_allowed_in_development_and_the_secret_is_shown_once(owner):
    channels, secret = notifications.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url="http://localhost:9000/hook"
    )
    assert secret.startswith("whsec_") and channels.webhook_secret == secret
    _, again = notifications.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url="http://localhost:9000/hook"
    )
    assert again == ""  # not shown again
    rotated = notifications.rotate_webhook_secret(owner)
    assert rotated != secret and notifications.settings_for(owner.pk).webhook_secret == rotated


def test_the_webhook_body_is_json_with_the_documented_keys(
    owner, agent, webhook_server, django_capture_on_commit_callbacks
):
    enable_webhook(owner, webhook_server.url)
    trip_failure_limit(owner, agent, django_capture_on_commit_callbacks)
    tasks.notify_pause(pause_tasks()[0])
    body = json.loads(webhook_server.received[0].body)
    assert set(body) == {
        "event",
        "schedule",
        "paused_at",
        "reason",
        "summary",
        "detail",
        "consecutive_failures",
        "max_consecutive_failures",
        "failures",
        "test",
    }
    assert set(body["failures"][0]) == {"run_id", "scheduled_for", "reason", "error_class"}


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1/hook", "https://10.0.0.5/hook", "https://169.254.169.254/latest"]
)
def test_in_production_a_webhook_to_a_private_address_is_refused(owner, settings, url):
    settings.PRODUCTION = True
    with pytest.raises(notifications.InvalidNotificationSettings) as refused:
        notifications.update_notification_settings(
            owner, email_enabled=False, webhook_enabled=True, webhook_url=url
        )
    assert "private or reserved network address" in refused.value.fields["webhook_url"]


def test_in_production_a_stored_url_that_now_resolves_privately_is_not_posted_to(
    owner, settings, webhook_server
):
    enable_webhook(owner, webhook_server.url)  # accepted in development
    settings.PRODUCTION = True
    (attempt,) = [a for a in notifications.send_test_notification(owner) if a.channel == "webhook"]
    assert attempt.outcome == "failed" and "private or reserved" in attempt.detail
    assert webhook_server.received == []
