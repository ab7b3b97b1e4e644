"""Recording a scheduled run's outcome: count, reset, pause at the limit, one-time completion,
and `schedule.run_accounted` in the same transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounting import ledger
from accounting.models import AccountingEvent, Reservation
from runs.failures import Diagnostics, ProviderTransientError
from runs.models import Run
from schedules.models import Occurrence, PauseEvent, Schedule
from tests.factories import fail, finish, make_schedule, materialize

pytestmark = pytest.mark.django_db


def test_a_failure_counts_and_a_completion_resets(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1
    assert schedule.status == "active"
    finish(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 0


def test_reaching_the_failure_limit_pauses_naming_the_run(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    tripping = fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.PAUSED
    assert schedule.pause.reason == PauseEvent.Reason.FAILURE_LIMIT
    assert schedule.pause.run_id == tripping.pk
    assert schedule.pause.actor is None
    assert (schedule.pause.failures_at_event, schedule.pause.failure_limit) == (2, 2)


def test_a_cancelled_run_does_not_count(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    occurrence = materialize(schedule)
    finish(occurrence, Run.Status.CANCELLED)
    schedule.refresh_from_db()
    occurrence.refresh_from_db()
    assert schedule.consecutive_failures == 1
    assert occurrence.outcome == Occurrence.Outcome.CANCELLED


def test_a_one_time_schedule_completes_after_its_only_occurrence_whatever_the_outcome(owner, agent):
    schedule = make_schedule(owner, agent, run_at=timezone.now() + timedelta(hours=1))
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.COMPLETED
    assert schedule.consecutive_failures == 1
    assert schedule.next_occurrence_at is None
    assert AccountingEvent.objects.get().payload["status"] == "failed"
    (event,) = schedule.pause_events.all()  # the completion is audited like a pause or a resume
    assert (event.action, event.failures_at_event, event.detail) == (
        "complete",
        1,
        "its only run ended failed",
    )


def test_the_event_carries_exactly_the_classification_and_usage(owner, agent):
    schedule = make_schedule(owner, agent)
    occurrence = materialize(schedule)
    Run.objects.filter(pk=occurrence.run_id).update(steps=3, model_calls=3, tool_calls=2, cost="0.42")
    failure = ProviderTransientError(
        "Overloaded; secret prompt text here",
        diagnostics=Diagnostics(provider="anthropic", provider_code="overloaded_error", http_status=529),
    )
    run = fail(occurrence, failure)

    event = AccountingEvent.objects.get()
    assert event.event == "schedule.run_accounted"
    assert event.payload == {
        "event": "schedule.run_accounted",
        "schedule_id": schedule.pk,
        "occurrence_id": occurrence.pk,
        "scheduled_for": occurrence.scheduled_for.isoformat(),
        "revision": 1,
        "run_id": run.pk,
        "status": "failed",
        "usage": {"steps": 3, "model_calls": 3, "tool_calls": 2, "cost": "0.42"},
        "failure": {
            "reason": "provider_error",
            "error_class": "ProviderTransientError",
            "provider": "anthropic",
            "provider_code": "overloaded_error",
            "http_status": 529,
        },
    }
    schedule.refresh_from_db()
    assert schedule.last_event == event


def test_a_completed_run_has_a_null_failure(owner, agent):
    schedule = make_schedule(owner, agent)
    finish(materialize(schedule))
    assert AccountingEvent.objects.get().payload["failure"] is None


def test_finishing_releases_the_reservation_once(owner, agent):
    schedule = make_schedule(owner, agent)
    occurrence = materialize(schedule)
    ledger.reserve(owner.pk, run_id=occurrence.run_id, amount=schedule.revision.run_limits.max_cost)
    run = finish(occurrence)
    assert Reservation.objects.get(run_id=run.pk).released_at is not None
    from runs.failures import Outcome
    from runs.services import finish_run

    assert (
        finish_run(run, Outcome(status="failed"), attempt=run.attempt) is False
    )  # the repeat changes nothing
    assert AccountingEvent.objects.count() == 1


def test_a_stale_attempt_cannot_overwrite_the_result(owner, agent):
    import uuid

    from runs.failures import Outcome, WorkerLost
    from runs.services import finish_run

    schedule = make_schedule(owner, agent)
    occurrence = materialize(schedule)
    run = Run.objects.get(pk=occurrence.run_id)
    assert finish_run(run, Outcome(status="completed"), attempt=uuid.uuid4()) is False
    assert finish_run(run, Outcome(status="failed", failure=WorkerLost("lost")), attempt=run.attempt) is True
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.failure_reason == "worker_lost"
