"""A schedule that pauses itself tells its owner once, after the pause commits, on each channel.

The pause row is the outbox: nothing is sent while the pause's transaction is open, and the
minute `notify` task sends whatever committed, even if the process that paused died at once."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from schedules import notices, services, tasks
from schedules.models import Notice, NotificationAttempt, PauseEvent
from tests.concurrency import race
from tests.database import database_url
from tests.factories import fail, make_agent, make_schedule, materialize, run_due

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.django_db

MARKER = "QUOKKA-PRIVATE-4471"


@pytest.fixture
def owner(owner):
    owner.email = "olga@example.com"
    owner.save()
    return owner


def enable_webhook(owner, url: str) -> str:
    _, secret = notices.update_notification_settings(
        owner, email_enabled=True, webhook_enabled=True, webhook_url=url
    )
    return secret


def unsent_notices() -> list[int]:
    """The self-pauses whose notice has not gone out: the outbox."""
    return list(
        Notice.objects.filter(notified_at__isnull=True, kind="paused")
        .filter(pause_event__reason__in=PauseEvent.SELF_PAUSES)
        .values_list("pause_event_id", flat=True)
    )


def trip_failure_limit(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == "paused"
    return schedule


def test_a_failure_limit_pause_notifies_once_per_channel_after_commit(
    owner, agent, mailoutbox, webhook_server
):
    secret = enable_webhook(owner, webhook_server.url)
    schedule = trip_failure_limit(owner, agent)

    assert unsent_notices() == [schedule.pause_events.get(action="pause").pk]
    assert mailoutbox == [] and webhook_server.received == []  # nothing is sent by the pause itself
    tasks.notify()
    tasks.notify()  # the next minute's run finds nothing left to send
    assert unsent_notices() == []

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
    assert received.headers[notices.SIGNATURE_HEADER] == expected


def test_a_rolled_back_pause_sends_nothing(owner, agent, mailoutbox):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    occurrence = materialize(schedule)

    def pause_then_roll_back() -> None:
        with transaction.atomic():
            fail(occurrence)
            raise RuntimeError("the pause does not commit")

    with pytest.raises(RuntimeError):
        pause_then_roll_back()
    tasks.notify()
    assert unsent_notices() == [] and mailoutbox == []
    assert not PauseEvent.objects.exists()


def test_resume_and_owner_pauses_send_nothing(owner, agent, mailoutbox):
    schedule = make_schedule(owner, agent)
    services.pause_schedule(schedule, by=owner)
    services.resume_schedule(schedule, by=owner)
    tasks.notify()
    assert mailoutbox == []
    owner_pause = PauseEvent.objects.filter(action="pause").get()
    assert not Notice.objects.filter(pause_event=owner_pause).exists()  # only self-pauses tell


def test_an_invalid_definition_pause_notifies_with_its_reason(owner, agent, mailoutbox):
    schedule = make_schedule(owner, agent)
    services.pause_for_invalid_definition(schedule, detail="its agent 'x' is retired")
    tasks.notify()
    assert "could not be run as defined: its agent 'x' is retired" in mailoutbox[0].body


def test_the_message_carries_no_prompt_or_provider_message(owner, mailoutbox, webhook_server):
    enable_webhook(owner, webhook_server.url)
    schedule = make_schedule(owner, make_agent(model="sim-bad-param"), prompt=f"Summarise {MARKER} please")
    run_due(schedule)
    last = run_due(schedule)
    assert MARKER in last.failure_message  # the provider echoed the prompt into its message
    tasks.notify()
    sent = mailoutbox[0].subject + mailoutbox[0].body + webhook_server.received[0].body.decode()
    assert MARKER not in sent and "Summarise" not in sent and "Invalid content" not in sent
    assert "invalid_request_error" in sent and "400" in sent  # the classification is there


def test_admission_refusals_and_lost_workers_are_classified_like_any_failure(owner, agent, mailoutbox):
    from decimal import Decimal

    from accounting import ledger
    from runs.failures import WorkerLost

    schedule = make_schedule(owner, agent)
    fail(materialize(schedule), WorkerLost("no heartbeat"))
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = Decimal("1.00")
    budget.save()
    run_due(schedule)  # refused: USD 5 does not fit under USD 1
    tasks.notify()
    body = mailoutbox[0].body
    assert "admission denied" in body
    assert "worker lost" in body
    assert "Failures counted: 2 of 2." in body


class TestWebhookDelivery:
    def notify(self, owner, agent, **kwargs):
        trip_failure_limit(owner, agent)
        return notices.deliver_pending(sleep=lambda s: None, **kwargs)

    def test_a_500_then_200_is_retried_and_delivered_once(self, owner, agent, webhook_server):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(500, 0), (200, 0)]
        attempts = self.notify(owner, agent)
        webhook = [(a.attempt, a.outcome, a.http_status) for a in attempts if a.channel == "webhook"]
        assert webhook == [(1, "retrying", 500), (2, "delivered", 200)]
        assert len(webhook_server.received) == 2
        assert webhook_server.received[0].body == webhook_server.received[1].body

    def test_a_410_is_permanent_and_not_retried(self, owner, agent, webhook_server):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(410, 0)]
        attempts = self.notify(owner, agent)
        webhook = [(a.attempt, a.outcome, a.http_status) for a in attempts if a.channel == "webhook"]
        assert webhook == [(1, "failed", 410)]
        assert len(webhook_server.received) == 1
        assert any(a.channel == "email" and a.outcome == "delivered" for a in attempts)  # unaffected

    def test_a_slow_endpoint_times_out_within_the_timeout(self, owner, agent, webhook_server, monkeypatch):
        monkeypatch.setattr(notices.delivery, "WEBHOOK_TIMEOUT_SECONDS", 0.5)
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(200, 3.0)] * 3
        trip_failure_limit(owner, agent)
        started = time.monotonic()
        attempts = notices.deliver_pending(sleep=lambda s: None)
        elapsed = time.monotonic() - started
        webhook = [(a.outcome, a.http_status) for a in attempts if a.channel == "webhook"]
        assert webhook == [("retrying", None), ("retrying", None), ("failed", None)]
        assert elapsed < 3 * 0.5 + 1.5  # three attempts, each cut off at the timeout
        assert "transient: No response from the provider (timeout" in attempts[-1].detail
        schedule = attempts[-1].schedule
        assert schedule.status == "paused"  # a failing webhook changes nothing about the schedule

    def test_a_retry_after_is_honoured_between_attempts(self, owner, agent, webhook_server):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(503, 0, {"Retry-After": "7"}), (200, 0)]
        slept: list[float] = []
        trip_failure_limit(owner, agent)
        attempts = notices.deliver_pending(sleep=slept.append)
        assert [a.outcome for a in attempts if a.channel == "webhook"] == ["retrying", "delivered"]
        assert slept and slept[0] >= 7  # the same retry policy as provider calls

    def test_repeated_permanent_failures_turn_the_webhook_off_with_a_note(self, owner, agent, webhook_server):
        enable_webhook(owner, webhook_server.url)
        webhook_server.replies = [(404, 0)] * 5
        for _ in range(notices.delivery.DISABLE_AFTER_PERMANENT_FAILURES):
            notices.send_test_notification(owner, sleep=lambda s: None)
        channels = notices.settings_for(owner.pk)
        assert channels.webhook_disabled_at is not None
        assert "3 permanent failures in a row (last: HTTP 404)" in channels.webhook_disabled_reason
        assert not channels.webhook_active
        notices.send_test_notification(owner, sleep=lambda s: None)
        assert len(webhook_server.received) == 3  # no more posts once it is off
        channels, _ = notices.update_notification_settings(
            owner, email_enabled=True, webhook_enabled=True, webhook_url=webhook_server.url + "?v=2"
        )
        assert channels.webhook_active  # saving a corrected URL turns it back on


def test_the_test_notification_reaches_a_local_endpoint(owner, mailoutbox, webhook_server):
    secret = enable_webhook(owner, webhook_server.url)
    attempts = notices.send_test_notification(owner)
    assert {(a.channel, a.outcome, a.is_test) for a in attempts} == {
        ("email", "delivered", True),
        ("webhook", "delivered", True),
    }
    received = webhook_server.received[0]
    assert received.json["test"] is True
    assert received.headers[notices.SIGNATURE_HEADER] == notices.sign(secret, received.body)


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
    with pytest.raises(notices.InvalidNotificationSettings) as refused:
        notices.update_notification_settings(owner, email_enabled=True, webhook_enabled=True, webhook_url=url)
    assert error in refused.value.fields["webhook_url"]


def test_http_to_localhost_is_allowed_in_development_and_the_secret_is_shown_once(owner):
    channels, secret = notices.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url="http://localhost:9000/hook"
    )
    assert secret.startswith("whsec_") and channels.webhook_secret == secret
    _, again = notices.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url="http://localhost:9000/hook"
    )
    assert again == ""  # not shown again
    rotated = notices.rotate_webhook_secret(owner)
    assert rotated != secret and notices.settings_for(owner.pk).webhook_secret == rotated


def test_the_webhook_body_is_json_with_the_documented_keys(owner, agent, webhook_server):
    enable_webhook(owner, webhook_server.url)
    trip_failure_limit(owner, agent)
    tasks.notify()
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
    settings.PRODUCTION, settings.ALLOW_PRIVATE_ADDRESSES = True, False
    with pytest.raises(notices.InvalidNotificationSettings) as refused:
        notices.update_notification_settings(
            owner, email_enabled=False, webhook_enabled=True, webhook_url=url
        )
    assert "private or reserved network address" in refused.value.fields["webhook_url"]


def test_in_production_a_stored_url_that_now_resolves_privately_is_not_posted_to(
    owner, settings, webhook_server
):
    enable_webhook(owner, webhook_server.url)  # accepted in development
    settings.PRODUCTION, settings.ALLOW_PRIVATE_ADDRESSES = True, False
    (attempt,) = [a for a in notices.send_test_notification(owner) if a.channel == "webhook"]
    assert attempt.outcome == "failed" and "private or reserved" in attempt.detail
    assert webhook_server.received == []


# -- the outbox --------------------------------------------------------------------------------


def test_a_pause_committed_by_a_process_killed_at_once_is_delivered_by_the_next_run(
    owner, agent, mailoutbox, webhook_server, transactional_db
):
    """The process that paused the schedule dies right after its commit (os._exit: no cleanup,
    no on-commit hooks). Nothing was sent; the next `notify` sends once per channel."""
    enable_webhook(owner, webhook_server.url)
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    occurrence = materialize(schedule)
    script = (
        "import os, django; django.setup()\n"
        "from tests.factories import fail\n"
        "from schedules.models import Occurrence\n"
        f"fail(Occurrence.objects.get(pk={occurrence.pk}))\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": database_url()}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT, timeout=60)

    schedule.refresh_from_db()
    assert schedule.status == "paused" and unsent_notices() == [schedule.pause_id]
    tasks.notify()
    tasks.notify()
    assert len(mailoutbox) == 1 and len(webhook_server.received) == 1
    rows = NotificationAttempt.objects.filter(schedule=schedule)
    assert sorted((r.channel, r.outcome) for r in rows) == [("email", "delivered"), ("webhook", "delivered")]
    assert unsent_notices() == []


def test_a_delivery_abandoned_midway_is_finished_after_its_lease_without_repeating_a_channel(
    owner, agent, mailoutbox, webhook_server
):
    enable_webhook(owner, webhook_server.url)
    schedule = trip_failure_limit(owner, agent)
    event = schedule.pause_events.get(action="pause")
    # A worker claimed it, sent the email, tried the webhook once and died before retrying.
    claimed_at = timezone.now() - notices.NOTICE_LEASE - timedelta(seconds=1)
    Notice.objects.filter(pause_event=event).update(notify_claimed_at=claimed_at)
    for channel, outcome in (("email", "delivered"), ("webhook", "retrying")):
        NotificationAttempt.objects.create(
            owner=owner,
            schedule=schedule,
            pause_event=event,
            notice=Notice.objects.get(pause_event=event),
            channel=channel,
            outcome=outcome,
            created_at=claimed_at,
        )
    tasks.notify()
    assert mailoutbox == []  # the email had gone out: not sent twice
    assert len(webhook_server.received) == 1  # the webhook, which had not, is sent now
    assert unsent_notices() == []


def test_a_claim_still_within_its_lease_is_left_to_its_worker(owner, agent, mailoutbox):
    schedule = trip_failure_limit(owner, agent)
    Notice.objects.filter(pause_event_id=schedule.pause_id).update(notify_claimed_at=timezone.now())
    tasks.notify()
    assert mailoutbox == [] and unsent_notices() == [schedule.pause_id]


def test_two_workers_delivering_at_once_send_each_channel_once(owner, agent, mailoutbox, transactional_db):
    trip_failure_limit(owner, agent)
    race([tasks.notify, tasks.notify])
    assert len(mailoutbox) == 1
    assert NotificationAttempt.objects.filter(channel="email").count() == 1


def test_the_audit_itself_cannot_be_changed_through_the_outbox(owner, agent):
    from accounting.models import AppendOnlyError

    schedule = trip_failure_limit(owner, agent)
    with pytest.raises(AppendOnlyError):
        PauseEvent.objects.filter(pk=schedule.pause_id).update(reason="owner")


def test_a_claim_is_stamped_when_it_is_made_so_a_slow_batch_does_not_hand_out_lapsed_claims(
    owner, agent, mailoutbox
):
    first, second = trip_failure_limit(owner, agent), trip_failure_limit(owner, agent)
    rival_took: list[int] = []
    with time_machine.travel(timezone.now(), tick=False) as clock:

        def slow(event_id: int) -> list[NotificationAttempt]:
            if event_id == second.pause_id:  # a rival worker starting now must leave it alone
                rival_took.extend(notices.drain_outbox(unsent(), lambda pk: [pk]))
            clock.shift(notices.NOTICE_LEASE + timedelta(minutes=1))  # webhook retries, say
            return []

        notices.drain_outbox(unsent(), slow)

    assert rival_took == []  # the rival found the second notice's claim fresh, made after the first
    notified = Notice.objects.filter(
        pause_event_id__in=[first.pause_id, second.pause_id], notified_at__isnull=False
    )
    assert notified.count() == 2 and unsent_notices() == []


def unsent():
    return Notice.objects.filter(kind="paused", notified_at__isnull=True)


def test_an_owner_zone_that_is_no_longer_a_zone_does_not_stop_the_notices(owner, agent, mailoutbox):
    from accounting.models import OwnerBudget

    schedule = trip_failure_limit(owner, agent)
    OwnerBudget.objects.filter(owner=owner).update(timezone="Mars/Olympus")  # old data
    tasks.notify()
    assert [m.subject for m in mailoutbox] == [f"Paused: {schedule.title}"]
    assert unsent_notices() == []
