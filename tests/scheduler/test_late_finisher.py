"""A worker frozen mid-call (SIGSTOP) is reaped `worker_lost`; when it wakes (SIGCONT) its
provider call returns and costs money. That money is recorded against the run, and the run's
counters, its ledger entries and its content-free accounting events still agree."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Run
from schedules import execution
from tests.factories import make_agent, make_schedule
from tests.scheduler.conftest import read_log, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_worker_frozen_past_its_lease_is_reaped_and_its_call_is_accounted_once(owner, spawn, settings):
    settings.RUN_HEARTBEAT_SECONDS, settings.RUN_LEASE_SECONDS = 1, 2
    schedule = make_schedule(
        owner,
        make_agent(model="sim-slow"),
        prompt="Take your time: delay=4",
        run_at=timezone.now() + timedelta(seconds=1),
    )
    time.sleep(1.1)
    worker = spawn("tick", "--sync", env={"RUN_HEARTBEAT_SECONDS": "1", "RUN_LEASE_SECONDS": "2"})

    def running() -> Run | None:
        """the worker to start the run"""
        return Run.objects.filter(status="running", heartbeat_at__isnull=False).first()

    run = wait_for(running, timeout=30)
    # Well inside the 4 s provider call (a freeze before the request is sent would rightly spend
    # nothing: the woken worker sees the run reaped and stops before asking).
    time.sleep(1.0)
    os.killpg(worker.pid, signal.SIGSTOP)  # frozen inside the provider call
    try:
        time.sleep(settings.RUN_LEASE_SECONDS + 1.5)
        assert execution.reap() == [run.pk]
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
    worker.wait(timeout=60)

    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("failed", "worker_lost"), read_log(worker)
    # The reaper charged the call the frozen worker had on the wire (its bound: the provider may
    # have billed it all); the worker, waking with the answer, found the call taken and charged
    # nothing again (docs/decisions/0006-streaming.md).
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.estimated and entry.cost == Decimal(entry.prices["bound"]["worst"])
    assert 0 < run.cost == entry.cost <= run.run_limits.max_cost and (run.steps, run.model_calls) == (1, 1)
    events = list(AccountingEvent.objects.filter(run_id=run.pk).order_by("id"))
    assert [e.event for e in events] == ["schedule.run_accounted"]
    assert Decimal(events[0].payload["usage"]["cost"]) == run.cost  # the reaper's event carries it
    assert events[0].payload["usage"]["steps"] == run.steps
    # Nothing else of the late response is kept: the run ended when it was reaped.
    assert not run.transcript.filter(role="assistant").exists()
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1  # counted once, by the reaper
