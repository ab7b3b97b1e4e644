"""sim-assistant through the real run loop and the OpenAI-compatible adapter
(docs/contract.md#the-simulated-provider)."""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine

from runs.models import TranscriptEntry
from schedules.models import Schedule, ScheduleRevision
from tests.factories import chat, chat_creates_at_once, make_assistant

pytestmark = pytest.mark.django_db

THURSDAY_MORNING = datetime.fromisoformat("2026-09-03T06:00:00+00:00")


@pytest.fixture(autouse=True)
def _created_at_once(owner):
    """What the assistant creates, without the owner's confirmation first (that is
    tests/schedules/test_proposals.py)."""
    chat_creates_at_once(owner)


def _tools(run):
    return [
        (e.tool_name, e.is_error, e.content)
        for e in TranscriptEntry.objects.filter(run=run, role="tool").order_by("seq")
    ]


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_every_weekday_at_730_creates_a_recurring_schedule_in_the_owners_zone(owner):
    run = chat(owner, make_assistant(), "every weekday at 7:30 brief me on AI news")

    assert run.status == "completed", run.failure_message
    schedule = Schedule.objects.get(owner=owner)
    revision = schedule.revision
    assert (revision.cron, revision.timezone, revision.via) == ("30 7 * * 1-5", "Europe/Riga", "chat")
    assert schedule.title == "AI news briefing"
    assert [name for name, _, _ in _tools(run)] == ["clock_now", "schedule_create"]
    assert run.answer.startswith(f"Done: I created schedule {schedule.pk} “AI news briefing”")
    assert "Weekdays at 07:30, Europe/Riga" in run.answer
    assert "budget USD 5.00 per run" in run.answer
    assert "synthesis reserves 2 steps, 2 model calls, USD 1.00" in run.answer
    assert "pauses after 2 consecutive failures" in run.answer
    assert "next run Fri 4 Sep 2026 at 07:30 EEST" in run.answer
    assert (revision.conversation_id, revision.run_id) == (run.conversation_id, run.pk)


@time_machine.travel(THURSDAY_MORNING, tick=False)
@pytest.mark.parametrize(
    ("message", "cron", "title"),
    [
        ("every day at 9 brief me on markets", "0 9 * * *", "Markets briefing"),
        ("Every Monday at 18:00 remind me to review the week", "0 18 * * 1", "Reminder: review the week"),
    ],
)
def test_other_recurring_phrasings(owner, message, cron, title):
    run = chat(owner, make_assistant(), message)

    schedule = Schedule.objects.get(owner=owner)
    assert (schedule.revision.cron, schedule.title) == (cron, title)
    assert run.answer.startswith("Done: I created schedule")


@time_machine.travel(THURSDAY_MORNING, tick=False)
@pytest.mark.parametrize(
    ("message", "run_at", "title"),
    [
        (
            "remind me tomorrow at 9 to renew the API key",
            "2026-09-04T06:00:00+00:00",
            "Reminder: renew the API key",
        ),
        ("on 2026-12-24 at 08:00 remind me to buy gifts", "2026-12-24T06:00:00+00:00", "Reminder: buy gifts"),
    ],
)
def test_one_time_phrasings(owner, message, run_at, title):
    run = chat(owner, make_assistant(), message)

    schedule = Schedule.objects.get(owner=owner)
    assert schedule.kind == "one_time" and schedule.title == title
    assert schedule.revision.run_at == datetime.fromisoformat(run_at)
    assert run.answer.startswith("Done: I created schedule")


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_rename_and_move_update_the_schedule(owner):
    agent = make_assistant()
    first = chat(owner, agent, "every weekday at 7:30 brief me on AI news")
    schedule = Schedule.objects.get(owner=owner)
    renamed = chat(
        owner, agent, f"rename schedule {schedule.pk} to Morning AI digest", conversation=first.conversation
    )
    moved = chat(owner, agent, f"move schedule {schedule.pk} to 8:00", conversation=first.conversation)

    schedule.refresh_from_db()
    assert schedule.title == "Morning AI digest"
    assert schedule.revision.cron == "0 8 * * 1-5"
    assert schedule.revision.number == 3
    assert renamed.answer.startswith("Done, renamed:") and moved.answer.startswith("Done, moved:")
    assert schedule.revision.limits == ScheduleRevision.objects.get(schedule=schedule, number=1).limits


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_a_usd_20_budget_is_refused_and_explained(owner):
    agent = make_assistant()
    first = chat(owner, agent, "every weekday at 7:30 brief me on AI news")
    schedule = Schedule.objects.get(owner=owner)
    run = chat(owner, agent, f"give schedule {schedule.pk} a USD 20 budget", conversation=first.conversation)

    ((name, is_error, content),) = _tools(run)
    assert name == "schedule_update" and is_error and "cannot be changed by schedule.update" in content
    assert "I cannot give schedule" in run.answer and "USD 20.00" in run.answer
    assert "Pin a revision" in run.answer
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_anything_else_gets_a_short_answer_sometimes_after_the_clock(owner):
    agent = make_assistant()
    hello = chat(owner, agent, "hello there")
    when = chat(owner, agent, "what time is it?", conversation=hello.conversation)

    assert hello.answer.startswith("I can set up briefings and reminders") and hello.tool_calls == 0
    assert when.tool_calls == 1 and when.answer == "It is Thursday 3 September 2026, 09:00 in Europe/Riga."
