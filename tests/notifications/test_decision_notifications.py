"""The owner is told when a request for new limits is decided, on the channels of pause notices:
the decided request is the outbox row, the minute `notify` task sends it once per channel, and
each attempt is recorded. Links use SITE_URL."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from schedules import notices, services, tasks
from schedules.models import Notice, NotificationAttempt, RevisionRequest
from schedules.schemas import DeclineBody, parse_explicit, parse_revision_request
from tests.factories import limits, make_schedule

pytestmark = pytest.mark.django_db

ASKED = limits(max_cost="2.00", synthesis_reserve_cost="1.00").to_json()


@pytest.fixture
def owner(owner):
    owner.email = "olga@example.com"
    owner.save()
    return owner


@pytest.fixture
def asked(owner, agent) -> RevisionRequest:
    schedule = make_schedule(owner, agent, title="Weekly spend review")
    body = {"limits": ASKED, "max_consecutive_failures": 2, "reason": "Runs cost USD 1.20."}
    return services.request_revision(schedule, parse_revision_request(body), by=owner, via="test")


def pin(asked: RevisionRequest, by) -> None:
    body = {"limits": ASKED, "max_consecutive_failures": 2, "reason": "As asked: USD 2 with a USD 1 reserve."}
    services.pin_from_request(asked, parse_explicit(body), by=by, via="admin", expected_number=None)


def test_an_open_request_sends_nothing(asked, mailoutbox):
    tasks.notify()
    assert mailoutbox == [] and not NotificationAttempt.objects.exists()


def test_a_pinned_request_is_told_once_per_channel_with_the_new_limits(
    asked, admin_user, mailoutbox, webhook_server, settings
):
    settings.SITE_URL = "http://127.0.0.1:8123"
    _, secret = notices.update_notification_settings(
        asked.schedule.owner, email_enabled=True, webhook_enabled=True, webhook_url=webhook_server.url
    )
    pin(asked, admin_user)
    tasks.notify()
    tasks.notify()  # nothing left for the next minute

    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    assert mail.subject == "New limits pinned: Weekly spend review"
    assert "was pinned by ada" in mail.body and "as revision 2" in mail.body
    assert "Cost per run: USD 2.00 (synthesis reserve USD 1.00)" in mail.body
    assert f"Open: http://127.0.0.1:8123/schedules/{asked.schedule_id}/" in mail.body
    assert len(webhook_server.received) == 1
    received = webhook_server.received[0]
    body = received.json
    assert body["event"] == "schedule.revision_request_decided"
    assert (body["request"]["id"], body["request"]["state"], body["revision"]) == (asked.pk, "pinned", 2)
    assert body["schedule"]["url"] == f"http://127.0.0.1:8123/schedules/{asked.schedule_id}/"
    expected = "sha256=" + hmac.new(secret.encode(), received.body, hashlib.sha256).hexdigest()
    assert received.headers[notices.SIGNATURE_HEADER] == expected

    attempts = NotificationAttempt.objects.filter(revision_request=asked).order_by("channel")
    assert [(a.channel, a.outcome, a.schedule_id) for a in attempts] == [
        ("email", "delivered", asked.schedule_id),
        ("webhook", "delivered", asked.schedule_id),
    ]
    assert Notice.objects.get(revision_request=asked).notified_at is not None


def test_a_declined_request_is_told_with_the_reason(asked, admin_user, mailoutbox):
    services.decline_request(asked, DeclineBody(reason="Fix the prompt first."), by=admin_user, via="admin")
    attempts = notices.deliver_pending()
    assert [(a.channel, a.outcome) for a in attempts] == [("email", "delivered")]
    assert mailoutbox[0].subject == "Limits request declined: Weekly spend review"
    assert "Reason: Fix the prompt first." in mailoutbox[0].body
    assert "The limits in force stay as they are." in mailoutbox[0].body


def test_a_claim_abandoned_midway_is_finished_without_repeating_a_channel(
    asked, admin_user, mailoutbox, webhook_server
):
    from datetime import timedelta

    from django.utils import timezone

    notices.update_notification_settings(
        asked.schedule.owner, email_enabled=True, webhook_enabled=True, webhook_url=webhook_server.url
    )
    pin(asked, admin_user)
    # A worker claimed it, sent the email and died before the webhook and the mark.
    stale = timezone.now() - notices.NOTICE_LEASE - timedelta(seconds=1)
    Notice.objects.filter(revision_request_id=asked.pk).update(notify_claimed_at=stale)
    NotificationAttempt.objects.create(
        owner_id=asked.schedule.owner_id,
        schedule_id=asked.schedule_id,
        revision_request=asked,
        notice=Notice.objects.get(revision_request=asked),
        channel="email",
        outcome="delivered",
        created_at=stale,
    )
    attempts = notices.deliver_pending()
    assert [a.channel for a in attempts] == ["webhook"]
    assert mailoutbox == []


def test_a_claim_within_its_lease_is_left_to_its_worker(asked, admin_user, mailoutbox):
    from django.utils import timezone

    pin(asked, admin_user)
    Notice.objects.filter(revision_request_id=asked.pk).update(notify_claimed_at=timezone.now())
    assert notices.deliver_pending() == []
    assert mailoutbox == []


def test_the_pause_notices_and_the_decision_notices_are_separate_rows(asked, admin_user, mailoutbox):
    pin(asked, admin_user)
    tasks.notify()
    attempt = NotificationAttempt.objects.get()
    assert attempt.pause_event_id is None and attempt.revision_request_id == asked.pk and not attempt.is_test
