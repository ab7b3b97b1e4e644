"""The least-privilege grants are enough for what each role really does
(docs/contract.md#database-roles): the tests run the web's and the scheduler's writes under a role that
has only the printed grants."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from schedules import execution, notices, services
from schedules.models import Notice, Schedule
from schedules.schemas import DeclineBody, parse_create, parse_explicit, parse_revision_request, parse_update
from tests.factories import limits, make_agent, make_schedule

pytestmark = pytest.mark.django_db


@contextmanager
def acting_as(kind: str) -> Iterator[None]:
    """SET ROLE to a fresh role holding only `db_grants --for kind` (rolled back with the test)."""
    role = f"least_{kind}_{uuid.uuid4().hex[:6]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}"')
    call_command("db_grants", "--role", role, "--for", kind, "--apply", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(f'SET ROLE "{role}"')
        try:
            yield
        finally:
            cursor.execute("RESET ROLE")


def test_the_scheduler_role_can_tick_run_notify_and_use_the_schedule_tools(owner, admin_user):
    agent = make_agent("tool-user", model="sim-research", tools=["clock.now", "schedule.create"])
    schedule = make_schedule(owner, agent, run_at=timezone.now() + timedelta(minutes=1))
    declined = decided_request(owner, agent, admin_user)
    with acting_as("scheduler"):
        enqueued: list[int] = []
        execution.materialize_due(enqueue=enqueued.extend, now=timezone.now() + timedelta(minutes=2))
        run = execution.execute_occurrence(enqueued[0], sleep=lambda s: None)
        assert run is not None and run.status == "completed"
        # What the chat tools do, inside the worker.
        created = services.create_schedule(
            owner,
            parse_create(
                {
                    "title": "From chat",
                    "prompt": "p",
                    "agent": agent.name,
                    "cron": "0 9 * * *",
                    "timezone": "UTC",
                }
            ),
            via="chat",
        )
        services.update_schedule(created, parse_update({"title": "From chat, renamed"}), by=owner, via="chat")
        execution.reap()
        # The notices outbox: a self-pause's notice and a decided request's, claimed, sent and
        # marked sent.
        services.pause_for_invalid_definition(created, detail="test")
        assert [a.channel for a in notices.deliver_pending()] == ["email", "email"]
    assert Notice.objects.get(revision_request=declined).notified_at is not None
    schedule.refresh_from_db()
    assert schedule.status == "completed"
    assert schedule.pause_events.filter(action="complete").exists()
    created.refresh_from_db()
    assert Notice.objects.get(pause_event=created.pause).notified_at is not None


def decided_request(owner, agent, admin_user):
    """A revision request an admin declined (its notice not yet sent)."""
    owner.email = "olga@example.com"
    owner.save()
    schedule = make_schedule(owner, agent, title="Asked")
    body = {"limits": limits(max_cost="2.00").to_json(), "max_consecutive_failures": 2, "reason": "More."}
    asked = services.request_revision(schedule, parse_revision_request(body), by=owner, via="test")
    return services.decline_request(asked, DeclineBody(reason="No."), by=admin_user, via="test")


def test_the_web_role_can_act_for_owners_and_delete_a_schedule(owner, admin_user, mailoutbox):
    owner.email = "olga@example.com"
    owner.save()
    schedule = make_schedule(owner, make_agent())
    with acting_as("web"):
        services.pause_schedule(schedule, by=owner)
        services.resume_schedule(schedule, by=owner)
        # Owners ask for limits; admins pin one request and decline another.
        body = {"limits": limits(max_cost="2.00").to_json(), "max_consecutive_failures": 2, "reason": "More."}
        asked = services.request_revision(schedule, parse_revision_request(body), by=owner, via="dashboard")
        services.pin_from_request(
            asked, parse_explicit(body), by=admin_user, via="admin", expected_number=None
        )
        again = services.request_revision(schedule, parse_revision_request(body), by=owner, via="dashboard")
        services.decline_request(again, DeclineBody(reason="Enough."), by=admin_user, via="admin")
        services.update_schedule(schedule, parse_update({"prompt": "Sharper."}), by=owner, via="dashboard")
        notices.update_notification_settings(owner, email_enabled=True, webhook_enabled=False, webhook_url="")
        assert [a.outcome for a in notices.send_test_notification(owner)] == ["delivered"]
        Schedule.objects.get(pk=schedule.pk).delete()
    assert not Schedule.objects.filter(pk=schedule.pk).exists()


def test_the_web_role_can_start_a_conversation_send_a_message_and_stop_it(owner):
    from runs import conversations
    from runs.services import cancel_run
    from runs.tasks import enqueue_runs
    from schedules import notices
    from tests.factories import make_assistant

    agent = make_assistant()
    with acting_as("web"):
        run = conversations.start_conversation(owner.pk, agent, "hello", enqueue=enqueue_runs)
        assert cancel_run(run)
        follow_up = conversations.send_message(run.conversation, "again", enqueue=enqueue_runs)
        assert cancel_run(follow_up)
        notices.completed.update_completion_settings(
            owner, completion_email=True, completion_webhook=False, webhook_content=False
        )
    assert run.conversation.runs.filter(status="cancelled").count() == 2


def test_the_scheduler_role_can_answer_a_message_and_send_completion_notices(owner, mailoutbox):
    from runs import conversations
    from schedules import notices
    from tests.factories import chat_creates_at_once, make_assistant

    owner.email = "olga@example.com"
    owner.save()
    notices.completed.update_completion_settings(
        owner, completion_email=True, completion_webhook=False, webhook_content=False
    )
    chat_creates_at_once(owner)  # the tool writes the revision (proposals: the test below)
    assistant = make_assistant()
    queued = conversations.start_conversation(
        owner.pk, assistant, "every weekday at 7:30 brief me on AI news", enqueue=lambda ids: None
    )
    schedule = make_schedule(owner, make_agent("briefer"), run_at=timezone.now() + timedelta(minutes=1))
    with acting_as("scheduler"):
        answered = conversations.execute_message(queued.pk, sleep=lambda s: None)
        assert answered is not None and answered.status == "completed", answered.failure_message
        enqueued: list[int] = []
        execution.materialize_due(enqueue=enqueued.extend, now=timezone.now() + timedelta(minutes=2))
        execution.execute_occurrence(enqueued[0], sleep=lambda s: None)
        assert [a.outcome for a in notices.deliver_pending()] == ["delivered"]
    assert Schedule.objects.filter(owner=owner, revisions__via="chat").exists()
    assert schedule.pk and len(mailoutbox) == 1


def test_the_scheduler_proposes_and_expires_and_the_web_confirms_and_declines(owner):
    """docs/contract.md#confirm-before-chat-creates-a-schedule: the schedule.create tool writes a
    proposal in the worker, the reaper records expiries; the owner decides on the web."""
    from runs import conversations
    from runs import services as run_services
    from schedules import proposals
    from schedules.models import Proposal
    from tests.factories import make_assistant

    assistant = make_assistant()
    asked = [
        conversations.start_conversation(owner.pk, assistant, message, enqueue=lambda ids: None)
        for message in (
            "every weekday at 7:30 brief me on AI news",
            "every day at 9 brief me on markets",
            "every Monday at 18:00 remind me to review the week",
        )
    ]
    with acting_as("scheduler"):
        for run in asked:
            answered = conversations.execute_message(run.pk, sleep=lambda s: None)
            assert answered is not None and answered.status == "completed", answered.failure_message
        first, second, third = Proposal.objects.order_by("pk")
        Proposal.objects.filter(pk=third.pk).update(expires_at=timezone.now())
        assert proposals.expire_stale() == 1
    with acting_as("web"):
        schedule, created = proposals.confirm(first.pk, owner)
        assert created and proposals.decline(second.pk, owner).status == "declined"
        with pytest.raises(proposals.ProposalExpired):
            proposals.confirm(third.pk, owner)
        run_services.delete_conversation(asked[1].conversation)  # its proposal goes with it
    assert schedule.revision.via == "chat" and not Proposal.objects.filter(pk=second.pk).exists()
