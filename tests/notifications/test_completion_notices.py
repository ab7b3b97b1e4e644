"""Told when a briefing is ready (opt-in): a completed scheduled run writes an outbox row in its
terminal transaction when the owner (or the schedule) asked for it; the minute `notify` task
sends it once per channel, by email with the answer, by the signed webhook with the answer only
when content is allowed, and records each attempt."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from runs.failures import Outcome
from runs.services import finish_run
from schedules import notices, tasks
from schedules.models import Notice, NotificationAttempt
from tests.factories import answered_conversation, fail, finish, make_assistant, make_schedule, materialize

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(owner):
    owner.email = "olga@example.com"
    owner.save()
    return owner


def _choose(owner, *, email=False, webhook=False, content=False):
    notices.completed.update_completion_settings(
        owner, completion_email=email, completion_webhook=webhook, webhook_content=content
    )


def test_off_by_default_a_completed_scheduled_run_sends_nothing(owner, agent, mailoutbox):
    finish(materialize(make_schedule(owner, agent)))

    assert not Notice.objects.filter(kind="completed").exists()
    assert tasks.notify() == "nothing to send" and mailoutbox == []


def test_by_email_the_answer_and_a_link_once_after_commit(owner, agent, mailoutbox, settings):
    settings.SITE_URL = "https://schedules.example.com"
    _choose(owner, email=True)
    schedule = make_schedule(owner, agent, title="Morning briefing")
    run = finish(materialize(schedule))

    notice = Notice.objects.filter(kind="completed").get()
    assert (notice.schedule_id, notice.run_id, notice.notified_at) == (schedule.pk, run.pk, None)
    assert mailoutbox == []  # the run's end sends nothing itself

    assert tasks.notify() == "email delivered"
    (mail,) = mailoutbox
    assert mail.subject == "Completed: Morning briefing" and mail.to == ["olga@example.com"]
    assert "\ndone\n" in mail.body  # the answer
    assert f"https://schedules.example.com/conversations/{run.conversation_id}/" in mail.body
    assert f"https://schedules.example.com/schedules/{schedule.pk}/" in mail.body
    attempt = NotificationAttempt.objects.get()
    assert (attempt.notice_id, attempt.schedule_id, attempt.channel) == (
        notice.pk,
        schedule.pk,
        "email",
    )
    notice.refresh_from_db()
    assert notice.notified_at is not None
    assert tasks.notify() == "nothing to send" and len(mailoutbox) == 1


def test_a_failed_or_cancelled_run_is_not_announced(owner, agent):
    _choose(owner, email=True)
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    finish(materialize(schedule), "cancelled")

    assert not Notice.objects.filter(kind="completed").exists()


def test_an_interactive_run_is_not_a_scheduled_completion(owner):
    _choose(owner, email=True)
    answered_conversation(owner, make_assistant())

    assert not Notice.objects.filter(kind="completed").exists()


def test_a_rolled_back_end_leaves_nothing_to_send(owner, agent):
    _choose(owner, email=True)
    occurrence = materialize(make_schedule(owner, agent))
    run = occurrence.run

    def end_then_die() -> None:
        with transaction.atomic():
            finish_run(run, Outcome(status="completed", answer="done"), attempt=run.attempt)
            raise RuntimeError("the worker died before the commit")

    with pytest.raises(RuntimeError):
        end_then_die()

    assert not Notice.objects.filter(kind="completed").exists()


def test_the_webhook_names_the_schedule_and_run_and_carries_no_answer_unless_allowed(
    owner, agent, webhook_server
):
    _, secret = notices.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url=webhook_server.url
    )
    _choose(owner, webhook=True)
    schedule = make_schedule(owner, agent, title="Morning briefing")
    run = finish(materialize(schedule))

    assert tasks.notify() == "webhook delivered"

    (received,) = webhook_server.received
    body = received.json
    assert body["event"] == "schedule.run_completed" and body["test"] is False
    assert body["schedule"]["id"] == schedule.pk and body["schedule"]["title"] == "Morning briefing"
    assert body["run"]["id"] == run.pk and body["run"]["url"].endswith(f"/runs/{run.pk}/")
    assert body["run"]["conversation_url"].endswith(f"/conversations/{run.conversation_id}/")
    assert (body["answer"], body["answer_included"]) == (None, False)
    expected = "sha256=" + hmac.new(secret.encode(), received.body, hashlib.sha256).hexdigest()
    assert received.headers["X-Schedules-Signature"] == expected
    assert received.headers["X-Schedules-Event"] == "schedule.run_completed"

    _choose(owner, webhook=True, content=True)
    finish(materialize(schedule))
    tasks.notify()
    assert webhook_server.received[-1].json["answer"] == "done"


def test_a_schedule_may_always_or_never_tell_whatever_the_owners_setting(owner, agent, mailoutbox):
    loud, quiet = make_schedule(owner, agent, title="Loud"), make_schedule(owner, agent, title="Quiet")
    notices.completed.set_schedule_completion_notices(loud, True)
    finish(materialize(loud))  # the owner chose no channel: the pause channels (email) are used
    _choose(owner, email=True)
    notices.completed.set_schedule_completion_notices(quiet, False)
    finish(materialize(quiet))

    tasks.notify()
    assert [m.subject for m in mailoutbox] == ["Completed: Loud"]


def test_a_delivery_that_died_is_sent_again_after_its_claim_expires_and_only_once(owner, agent, mailoutbox):
    _choose(owner, email=True)
    finish(materialize(make_schedule(owner, agent)))
    notice = Notice.objects.filter(kind="completed").get()
    Notice.objects.filter(kind="completed", pk=notice.pk).update(
        notify_claimed_at=timezone.now()
    )  # a worker took it

    assert notices.deliver_pending() == []  # its claim is still fresh
    later = timezone.now() + notices.NOTICE_LEASE + timedelta(seconds=1)
    assert [a.outcome for a in notices.deliver_pending(now=later)] == ["delivered"]
    assert notices.deliver_pending(now=later + timedelta(minutes=10)) == []
    assert len(mailoutbox) == 1


def test_a_run_deleted_with_its_conversation_before_the_notice_is_said_so(owner, agent, mailoutbox):
    _choose(owner, email=True)
    run = finish(materialize(make_schedule(owner, agent)))
    run.conversation.delete()

    tasks.notify()
    assert "The run has since been deleted with its conversation." in mailoutbox[0].body
