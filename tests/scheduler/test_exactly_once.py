"""No slot runs twice: racing materializers (threads and processes) and duplicate deliveries."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from accounting.models import LedgerEntry
from runs.models import Run
from schedules import execution
from schedules.models import Occurrence
from tests.concurrency import race
from tests.factories import make_agent, make_schedule
from tests.scheduler.conftest import read_log, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def owner(owner):
    """An owner whose ceilings admit dozens of runs at once: these tests are about races."""
    from decimal import Decimal

    from accounting import ledger

    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = budget.monthly_ceiling = Decimal("10000")
    budget.save()
    return owner


def test_racing_materializer_threads_write_one_occurrence_and_one_run_per_slot(owner):
    agent = make_agent(model="sim-research")
    # One due slot each: created at 12:01, ticked at 12:05:30 (the 12:05 slot, within grace).
    created = timezone.now().replace(hour=12, minute=1, second=0, microsecond=0) - timedelta(days=1)
    for index in range(40):
        make_schedule(owner, agent, title=f"Briefing {index}", cron="*/5 * * * *", tz="UTC", now=created)
    at = created + timedelta(minutes=4, seconds=30)

    results = race([lambda: execution.materialize_due(enqueue=lambda ids: None, now=at, batch=7)] * 4)

    assert not [r for r in results if isinstance(r, Exception)], results
    assert sum(len(r.enqueued) for r in results) == 40
    slots = Counter(Occurrence.objects.values_list("schedule_id", "scheduled_for"))
    assert len(slots) == 40 and set(slots.values()) == {1}
    assert Run.objects.count() == 40


def test_racing_tick_processes_run_every_slot_exactly_once(owner, spawn):
    agent = make_agent(model="sim-research")
    now = timezone.now()
    # Each made as of `now`, however long the thirty take on a loaded machine (their slot is checked
    # to be in the future against it), and all due together once it has passed.
    for index in range(30):
        make_schedule(owner, agent, title=f"Briefing {index}", run_at=now + timedelta(seconds=6), now=now)
    wait_for(lambda: timezone.now() > now + timedelta(seconds=6.5), timeout=10)

    first, second = spawn("tick", "--sync"), spawn("tick", "--sync")
    assert first.wait(timeout=120) == 0, read_log(first)
    assert second.wait(timeout=120) == 0, read_log(second)

    assert Occurrence.objects.count() == 30
    assert Run.objects.count() == 30
    assert set(Run.objects.values_list("status", flat=True)) == {"completed"}
    assert Counter(LedgerEntry.objects.values_list("run_id", flat=True)) == {
        pk: 3 for pk in Run.objects.values_list("pk", flat=True)
    }


def test_the_same_task_delivered_twice_runs_once(owner):
    schedule = make_schedule(owner, make_agent(model="sim-research"))
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))
    (occurrence_id,) = enqueued

    first = execution.execute_occurrence(occurrence_id, sleep=lambda s: None)
    second = execution.execute_occurrence(occurrence_id, sleep=lambda s: None)

    assert first is not None and first.status == "completed"
    assert second is None
    assert LedgerEntry.objects.filter(run_id=first.pk).count() == 3


def test_the_same_task_delivered_twice_at_once_runs_once(owner):
    schedule = make_schedule(owner, make_agent(model="sim-research"))
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))
    (occurrence_id,) = enqueued

    results = race([lambda: execution.execute_occurrence(occurrence_id, sleep=lambda s: None)] * 5)

    ran = [r for r in results if isinstance(r, Run)]
    assert len(ran) == 1 and results.count(None) == 4
    assert Run.objects.count() == 1
    assert LedgerEntry.objects.count() == 3  # one run's debits, once


def test_a_task_for_a_cancelled_queued_run_does_nothing(owner):
    from runs.services import cancel_run

    schedule = make_schedule(owner, make_agent(model="sim-research"))
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))
    occurrence = Occurrence.objects.get()
    cancel_run(occurrence.run)

    assert execution.execute_occurrence(occurrence.pk) is None
    occurrence.refresh_from_db()
    assert occurrence.outcome == "cancelled"
    assert not LedgerEntry.objects.exists()
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 0


def test_a_late_finisher_of_a_reaped_attempt_cannot_overwrite_it_but_its_spend_is_kept(owner, settings):
    settings.RUN_LEASE_SECONDS = 2
    schedule = make_schedule(owner, make_agent(model="sim-slow"), prompt="delay=2")
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: (results.append(execution.execute_occurrence(enqueued[0])), connection.close())
    )
    worker.start()
    run = wait_for(lambda: Run.objects.filter(status="running").first(), timeout=10)

    lost = execution.reap(now=timezone.now() + timedelta(seconds=10))  # the lease has long run out
    worker.join(timeout=30)

    assert lost == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("failed", "worker_lost")
    assert results[0].status == "failed"  # the finisher saw it was no longer its run
    assert LedgerEntry.objects.filter(run_id=run.pk).count() >= 1  # the provider call was paid for
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1


def test_the_reaper_leaves_a_run_that_heartbeats_again_before_it_is_failed(owner):
    from runs.failures import Outcome, WorkerLost
    from runs.services import finish_run

    schedule = make_schedule(owner, make_agent(model="sim-research"))
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))
    run = Occurrence.objects.get().run
    Run.objects.filter(pk=run.pk).update(status="running", attempt=uuid.uuid4(), heartbeat_at=timezone.now())
    run.refresh_from_db()
    lost = Outcome(status="failed", failure=WorkerLost("no heartbeat"))
    # Selected as lost a moment ago; it has heartbeated since.
    assert (
        finish_run(run, lost, attempt=run.attempt, silent_since=timezone.now() - timedelta(minutes=1))
        is False
    )
    run.refresh_from_db()
    assert run.status == "running"


def test_a_long_queued_run_is_failed_only_once_its_task_is_gone(owner, settings):
    from django_q.models import OrmQ

    from schedules import tasks

    schedule = make_schedule(owner, make_agent(model="sim-research"))
    with transaction.atomic():
        execution.materialize_due(
            enqueue=tasks.enqueue_occurrences, now=schedule.next_occurrence_at + timedelta(seconds=1)
        )
    run = Occurrence.objects.get().run
    much_later = timezone.now() + timedelta(
        seconds=settings.Q_RETRY_SECONDS + settings.RUN_LEASE_SECONDS + 60
    )

    assert execution.reap(now=much_later, queued_tasks=tasks._queued_tasks) == []  # still waiting
    OrmQ.objects.all().delete()  # the task was lost
    assert execution.reap(now=much_later, queued_tasks=tasks._queued_tasks) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("failed", "worker_lost")
    assert "its task was lost" in run.failure_message


def test_a_message_waiting_behind_a_backlog_is_not_reaped_until_its_task_is_gone(owner, settings):
    from django_q.models import OrmQ

    from runs import conversations
    from runs.tasks import enqueue_runs
    from schedules import tasks
    from tests.factories import make_assistant

    run = conversations.start_conversation(owner.pk, make_assistant(), "hello", enqueue=enqueue_runs)
    much_later = timezone.now() + timedelta(
        seconds=settings.Q_RETRY_SECONDS + settings.RUN_LEASE_SECONDS + 60
    )

    assert execution.reap(now=much_later, queued_tasks=tasks._queued_tasks) == []  # still waiting
    OrmQ.objects.all().delete()  # the task was lost
    assert execution.reap(now=much_later, queued_tasks=tasks._queued_tasks) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("failed", "worker_lost")
