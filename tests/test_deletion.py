"""Deleting a conversation deletes its runs and failure details; spend and events stay."""

from __future__ import annotations

import pytest

from accounting import ledger
from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Conversation, Run, TranscriptEntry
from runs.services import ConversationBusy, delete_conversation
from schedules.models import Occurrence, Schedule
from tests.factories import fail, make_schedule, materialize, spend

pytestmark = pytest.mark.django_db


def test_deleting_a_conversation_keeps_spend_events_and_the_occurrence_outcome(owner, agent):
    schedule = make_schedule(owner, agent)
    occurrence = materialize(schedule)
    spend(owner.pk, "0.60", run_id=occurrence.run_id, schedule_id=schedule.pk, tokens=(1000, 100))
    run = fail(occurrence)
    spent_before = ledger.summarize(owner.pk).spent_month

    deleted = delete_conversation(run.conversation)

    assert deleted == 1
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not TranscriptEntry.objects.filter(run_id=run.pk).exists()
    assert not Conversation.objects.exists()
    occurrence.refresh_from_db()
    assert occurrence.run is None
    assert occurrence.outcome == "failed"
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 1
    assert ledger.summarize(owner.pk).spent_month == spent_before
    assert AccountingEvent.objects.get().payload["failure"]["reason"] == "budget_exhausted"


def test_a_conversation_with_a_run_in_flight_cannot_be_deleted(owner, agent):
    occurrence = materialize(make_schedule(owner, agent))
    with pytest.raises(ConversationBusy):
        delete_conversation(Run.objects.get(pk=occurrence.run_id).conversation)
    assert Run.objects.count() == 1


def test_deleting_a_schedule_keeps_spend_and_events(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    schedule.delete()
    assert not Schedule.objects.exists()
    assert not Occurrence.objects.exists()
    assert AccountingEvent.objects.count() == 1
