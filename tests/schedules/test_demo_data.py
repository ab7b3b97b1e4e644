"""`manage.py demo_data`: its conversation with the assistant came from the real run loop."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from runs.models import Conversation, TranscriptEntry
from schedules.models import Proposal, Schedule, ScheduleRevision

pytestmark = pytest.mark.django_db


def test_the_demo_conversation_confirmed_two_schedules_in_chat_and_was_refused_a_budget():
    call_command("demo_data", stdout=io.StringIO())

    conversation = Conversation.objects.get(title="every weekday at 7:30 brief me on AI news")
    runs = list(conversation.runs.order_by("pk"))
    assert [run.status for run in runs] == ["completed"] * 5
    assert [run.prompt for run in runs][1::2] == ["yes", "yes"]  # each proposal confirmed in chat
    assert [run.answer for run in runs][1::2] == ["Done — it is on your schedules."] * 2
    chat = ScheduleRevision.objects.filter(via="chat", conversation_id=conversation.pk).order_by("pk")
    assert [(r.schedule.title, r.path, r.run_id) for r in chat] == [
        ("AI news briefing", "schedule.create", runs[0].pk),
        ("Reminder: review the week's spend", "schedule.create", runs[2].pk),
    ]
    assert list(Proposal.objects.filter(conversation=conversation).values_list("status", flat=True)) == [
        "confirmed",
        "confirmed",
    ]
    refusal = TranscriptEntry.objects.get(run=runs[4], role="tool")
    assert refusal.is_error and "cannot be changed by schedule.update" in refusal.content
    assert runs[4].history_sent == 4

    call_command("demo_data", stdout=io.StringIO())  # idempotent
    assert Conversation.objects.filter(title=conversation.title).count() == 1
    assert Schedule.objects.filter(title="AI news briefing").count() == 1
