"""Real django-q2 clusters in child processes: end to end, on their own, and killed mid-run."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from django_q.models import Success as QueueSuccess

from accounting import ledger
from accounting.models import AccountingEvent, LedgerEntry, Reservation
from runs.failures import Outcome
from runs.models import Run
from runs.services import finish_run
from schedules import execution
from schedules.models import Occurrence, Schedule
from schedules.tasks import enqueue_occurrences, ensure_periodic_tasks
from tests.factories import make_agent, make_schedule
from tests.scheduler.conftest import read_log, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_qcluster_executes_a_due_one_time_schedule_end_to_end(owner, spawn):
    schedule = make_schedule(
        owner, make_agent(model="sim-research"), run_at=timezone.now() + timedelta(seconds=1)
    )
    time.sleep(1.1)
    report = execution.materialize_due(enqueue=enqueue_occurrences)
    assert len(report.enqueued) == 1
    cluster = spawn("qcluster")

    def finished() -> Run | None:
        """the run to finish"""
        return Run.objects.filter(status__in=Run.TERMINAL).first()

    run = wait_for(finished, timeout=60)
    assert run.status == "completed", read_log(cluster)
    assert (run.steps, run.tool_calls) == (3, 2)
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 3
    assert sum(e.cost for e in LedgerEntry.objects.filter(run_id=run.pk)) == run.cost
    schedule.refresh_from_db()
    assert schedule.status == "completed"
    assert AccountingEvent.objects.get().payload["status"] == "completed"
    assert not Reservation.objects.filter(released_at__isnull=True).exists()
    # The run's outcome is on the run: django-q2 keeps no row for the tasks that claimed and ran
    # it (its monitor would read them all again for every task).
    assert not QueueSuccess.objects.exists()


def test_the_periodic_tick_fires_on_its_own(owner, spawn):
    ensure_periodic_tasks()
    schedule = make_schedule(
        owner, make_agent(model="sim-research"), run_at=timezone.now() + timedelta(seconds=2)
    )
    spawn("qcluster")

    def completed() -> bool:
        """the cluster's own tick to run the schedule"""
        return Schedule.objects.filter(pk=schedule.pk, status="completed").exists()

    wait_for(completed, timeout=120, interval=1)
    assert Run.objects.get().status == "completed"


def test_kill_9_of_the_worker_mid_run_is_reaped_as_worker_lost_and_counted(owner, spawn, settings):
    schedule = make_schedule(owner, make_agent(model="sim-slow"), prompt="Take your time: delay=60")
    report = execution.materialize_due(
        enqueue=enqueue_occurrences, now=schedule.next_occurrence_at + timedelta(seconds=1)
    )
    assert len(report.enqueued) == 1
    cluster = spawn("qcluster", env={"RUN_HEARTBEAT_SECONDS": "1", "RUN_LEASE_SECONDS": "3"})

    def running() -> Run | None:
        """the run to start and heartbeat"""
        return Run.objects.filter(
            status="running", heartbeat_at__gt=timezone.now() - timedelta(seconds=2)
        ).first()

    run = wait_for(running, timeout=60)
    assert ledger.summarize(owner.pk).open_total == Decimal("5.00")
    os.killpg(cluster.pid, signal.SIGKILL)
    cluster.wait(timeout=10)

    settings.RUN_LEASE_SECONDS = 3
    time.sleep(3.5)
    assert execution.reap() == [run.pk]

    run.refresh_from_db()
    assert (run.status, run.failure_reason, run.error_class) == ("failed", "worker_lost", "WorkerLost")
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1
    assert ledger.summarize(owner.pk).open_total == Decimal("0")
    assert AccountingEvent.objects.get().payload["failure"] == {
        "reason": "worker_lost",
        "error_class": "WorkerLost",
    }
    assert Occurrence.objects.get().outcome == "failed"
    # A late finisher of the killed attempt cannot overwrite the reaper's result.
    assert finish_run(run, Outcome(status="completed", answer="late"), attempt=run.attempt) is False
    run.refresh_from_db()
    assert run.status == "failed" and run.answer == ""
    assert execution.reap() == []  # idempotent
