"""Sending a message (docs/contract.md#conversations): one transaction writes the conversation, the run,
its first transcript entry, its reservation and its task, or nothing at all."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import connection
from django_q.models import OrmQ

from accounting import ledger
from accounting.models import OwnerBudget, Reservation
from runs import conversations
from runs.conversations import execute_message
from runs.models import Agent, Conversation, Run, TranscriptEntry
from runs.services import cancel_run
from runs.tasks import enqueue_runs
from tests.factories import (
    answered_conversation,
    chat,
    fail,
    make_agent,
    make_assistant,
    make_schedule,
    materialize,
    running_run,
)

pytestmark = pytest.mark.django_db


def _nothing_written() -> None:
    assert not Conversation.objects.exists()
    assert not Run.objects.exists()
    assert not Reservation.objects.exists()
    assert not OrmQ.objects.exists()


def test_the_first_message_writes_the_conversation_its_queued_run_reservation_and_task(owner):
    agent = make_assistant()
    queued: list[int] = []

    run = conversations.start_conversation(
        owner.pk, agent, "every day at 9 brief me on markets", enqueue=queued.extend
    )

    assert queued == [run.pk]
    assert run.status == "queued" and run.kind == "interactive"
    conversation = run.conversation
    assert (conversation.agent, conversation.title) == (agent, "every day at 9 brief me on markets")
    assert list(TranscriptEntry.objects.filter(run=run).values_list("role", "content")) == [
        ("user", "every day at 9 brief me on markets")
    ]
    assert run.run_limits.synthesis_reserve_steps == 1  # the docs/decisions/0001, amendment interactive
    # defaults
    reservation = Reservation.objects.get(run_id=run.pk)
    assert reservation.amount == run.run_limits.max_cost and reservation.released_at is None


def test_the_task_is_written_in_the_same_transaction_and_the_worker_answers_it(owner):
    run = conversations.start_conversation(owner.pk, make_assistant(), "hello", enqueue=enqueue_runs)

    (task,) = OrmQ.objects.all()
    assert task.task["func"] == "runs.tasks.run_message" and task.task["args"] == (run.pk,)
    assert execute_message(run.pk).status == "completed"
    assert execute_message(run.pk) is None  # delivered twice: claimed once
    run.refresh_from_db()
    assert run.answer.startswith("I can set up briefings")
    assert Reservation.objects.get(run_id=run.pk).released_at is not None


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ("", "message must not be empty"),
        ("   \n\t ", "message must not be empty"),
        ("x" * 8001, "message must be at most 8,000 characters (this one has 8,001)"),
        ("nul \x00 byte", "message must not contain NUL characters"),
        (42, "message must be text"),
    ],
    ids=["empty", "blank", "oversized", "nul", "not text"],
)
def test_a_message_that_cannot_be_sent_is_refused_in_words_and_nothing_is_written(owner, message, words):
    with pytest.raises(conversations.InvalidMessage) as refused:
        conversations.parse_message(message)

    assert set(refused.value.fields) == {"message"}
    assert words in refused.value.fields["message"]
    _nothing_written()


def test_the_limit_is_a_setting(settings):
    settings.CONVERSATION_MESSAGE_MAX_CHARS = 10
    assert conversations.parse_message("  ten chars  ") == "ten chars"
    with pytest.raises(conversations.InvalidMessage, match="at most 10 characters"):
        conversations.parse_message("eleven char")


@pytest.mark.parametrize("name", ["nobody", "", "retired"])
def test_an_agent_that_cannot_be_used_is_a_field_error(db, name):
    Agent.objects.filter(pk=make_agent("retired").pk).update(is_active=False)

    with pytest.raises(conversations.InvalidMessage) as refused:
        conversations.usable_agent(name)

    assert "agent" in refused.value.fields


def test_a_refused_admission_says_why_with_the_figures_and_writes_nothing(owner):
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = Decimal("3.00")
    budget.save(update_fields=["daily_ceiling"])
    queued: list[int] = []

    with pytest.raises(conversations.NotAdmitted) as refused:
        conversations.start_conversation(owner.pk, make_assistant(), "hello", enqueue=queued.extend)

    assert refused.value.message == (
        "Not sent: each message reserves its cost limit until it is answered, and the daily ceiling of "
        "USD 3.00 would be exceeded: spent USD 0.00, reserved USD 0.00, this run needs USD 5.00. "
        "It fits again once the daily spend leaves room, or an admin raises the ceiling."
    )
    assert queued == []
    _nothing_written()


def test_a_follow_up_refused_admission_leaves_the_conversation_as_it_was(owner):
    agent = make_assistant()
    conversation = answered_conversation(owner, agent)
    OwnerBudget.objects.filter(owner_id=owner.pk).update(daily_ceiling=Decimal("1"))

    with pytest.raises(conversations.NotAdmitted):
        conversations.send_message(conversation, "and again", enqueue=enqueue_runs)

    assert conversation.runs.count() == 1
    assert not OrmQ.objects.exists()


def test_a_second_message_while_one_is_in_flight_is_refused(owner):
    agent = make_assistant()
    first = conversations.start_conversation(owner.pk, agent, "hello", enqueue=lambda ids: None)

    with pytest.raises(conversations.RunInProgress):
        conversations.send_message(first.conversation, "are you there?", enqueue=enqueue_runs)

    assert first.conversation.runs.count() == 1
    assert Reservation.objects.count() == 1 and not OrmQ.objects.exists()


def test_a_follow_up_carries_on_the_conversation_and_its_activity(owner):
    agent = make_assistant()
    first = chat(owner, agent, "hello")
    before = Conversation.objects.get(pk=first.conversation_id).last_activity_at

    second = chat(owner, agent, "what time is it?", conversation=first.conversation)

    assert second.status == "completed" and second.conversation_id == first.conversation_id
    assert second.history_sent == 1 and second.history_omitted is False
    assert Conversation.objects.get(pk=first.conversation_id).last_activity_at > before


def test_a_scheduled_runs_conversation_takes_no_messages(owner, agent):
    run = fail(materialize(make_schedule(owner, agent)))

    with pytest.raises(conversations.ScheduledConversation):
        conversations.send_message(run.conversation, "why?", enqueue=enqueue_runs)

    assert run.conversation.runs.count() == 1


def test_a_conversation_whose_agent_was_retired_takes_no_more_messages(owner):
    agent = make_assistant()
    conversation = answered_conversation(owner, agent)
    Agent.objects.filter(pk=agent.pk).update(is_active=False)

    with pytest.raises(conversations.AgentRetired, match="has been retired"):
        conversations.send_message(conversation, "still there?", enqueue=enqueue_runs)


def test_a_message_to_a_deleted_conversation_is_not_found(owner):
    conversation = answered_conversation(owner, make_assistant())
    Conversation.objects.filter(pk=conversation.pk).delete()

    with pytest.raises(Conversation.DoesNotExist):
        conversations.send_message(conversation, "hello?", enqueue=enqueue_runs)
    assert not Run.objects.exists()


def test_stop_cancels_without_a_failure_and_releases_the_reservation(owner):
    run = conversations.start_conversation(owner.pk, make_assistant(), "hello", enqueue=lambda ids: None)

    assert cancel_run(run) is True
    assert cancel_run(run) is False  # the repeat changes nothing

    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("cancelled", "")
    assert Reservation.objects.get(run_id=run.pk).released_at is not None
    assert conversations.execute_message(run.pk) is None  # its task, delivered later, does nothing


def test_the_owners_last_agent_is_the_default_for_a_new_conversation(owner):
    assert conversations.last_agent(owner.pk) is None
    first, second = make_assistant(), make_agent("writer")
    answered_conversation(owner, first)
    answered_conversation(owner, second)

    assert conversations.last_agent(owner.pk) == second


def test_one_interactive_run_in_flight_per_conversation_is_also_a_database_rule(owner):
    agent = make_assistant()
    conversation = answered_conversation(owner, agent)
    running_run(owner, agent, conversation=conversation)

    with pytest.raises(Exception, match="run_one_in_flight_per_conversation"):
        running_run(owner, agent, conversation=conversation)


@pytest.mark.django_db(transaction=True)
def test_two_messages_sent_at_the_same_moment_start_one_run(owner):
    agent = make_assistant()
    conversation = answered_conversation(owner, agent)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def send(text: str) -> None:
        try:
            barrier.wait()
            conversations.send_message(conversation, text, enqueue=enqueue_runs)
            outcomes.append("sent")
        except conversations.RunInProgress:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(f"message {i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["refused", "refused", "refused", "sent"]
    assert conversation.runs.filter(status="queued").count() == 1
    assert OrmQ.objects.count() == 1
    assert Reservation.objects.filter(released_at__isnull=True).count() == 1


def test_a_conversation_without_an_agent_or_runs_takes_no_message(owner):
    conversation = Conversation.objects.create(owner=owner, title="Made in the admin")

    with pytest.raises(conversations.AgentRetired, match="has no agent to continue with"):
        conversations.send_message(conversation, "hello?", enqueue=enqueue_runs)
    assert not Run.objects.exists()
