"""`manage.py demo_data`: its conversation with the assistant came from the real run loop."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from runs.models import Conversation, TranscriptEntry
from schedules.models import Schedule, ScheduleRevision

pytestmark = pytest.mark.django_db


def test_the_demo_conversation_created_two_schedules_in_chat_and_was_refused_a_budget():
    call_command("demo_data", stdout=io.StringIO())

    conversation = Conversation.objects.get(title="every weekday at 7:30 brief me on AI news")
    runs = list(conversation.runs.order_by("pk"))
    assert [run.status for run in runs] == ["completed", "completed", "completed"]
    chat = ScheduleRevision.objects.filter(via="chat", conversation_id=conversation.pk).order_by("pk")
    assert [(r.schedule.title, r.path, r.run_id) for r in chat] == [
        ("AI news briefing", "schedule.create", runs[0].pk),
        ("Reminder: review the week's spend", "schedule.create", runs[1].pk),
    ]
    refusal = TranscriptEntry.objects.get(run=runs[2], role="tool")
    assert refusal.is_error and "cannot be changed by schedule.update" in refusal.content
    assert runs[2].history_sent == 2

    call_command("demo_data", stdout=io.StringIO())  # idempotent
    assert Conversation.objects.filter(title=conversation.title).count() == 1
    assert Schedule.objects.filter(title="AI news briefing").count() == 1
