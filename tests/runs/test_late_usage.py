"""A provider response that arrives after its run was reaped still cost money: the ledger, the
run's counters and its content-free accounting events agree, and they are written together or
not at all. Both ways a step is written (one statement on PostgreSQL, the ORM elsewhere)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.utils import timezone

from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Run
from runs.services import fail_lost_runs
from runs.signals import late_usage_recorded
from schedules import execution
from tests.factories import make_schedule
from tests.runs.wire import OPENAI, Provider, ledger_total, make_wire_agent

pytestmark = pytest.mark.django_db


def _reaped_mid_call(owner) -> tuple[Run, Provider]:
    """A scheduled run whose worker is reaped while its first provider call is out (as if the
    worker was frozen past its lease): the response then arrives anyway."""
    schedule = make_schedule(owner, make_wire_agent(OPENAI))
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))

    def reaped_then_answered(request: httpx.Request) -> dict:
        assert fail_lost_runs(now=timezone.now() + timedelta(hours=1))  # the lease ran out long ago
        return OPENAI.tools(("clock_now", {}), usage=(4000, 500))

    provider = Provider(reaped_then_answered)
    with provider.client() as client:
        execution.execute_occurrence(enqueued[0], client=client, sleep=lambda s: None)
    return Run.objects.get(), provider


def test_the_late_usage_is_on_the_ledger_the_counters_and_a_second_event(owner):
    run, provider = _reaped_mid_call(owner)

    assert (run.status, run.failure_reason) == ("failed", "worker_lost")
    assert len(provider.requests) == 1
    assert run.cost > 0 and run.cost == ledger_total(run)
    assert (run.steps, run.model_calls, run.tool_calls) == (1, 1, 1)
    events = list(AccountingEvent.objects.filter(run_id=run.pk).order_by("id"))
    assert [e.event for e in events] == ["schedule.run_accounted", "schedule.late_usage_accounted"]
    assert sum(Decimal(e.payload["usage"]["cost"]) for e in events) == run.cost
    assert sum(e.payload["usage"]["steps"] for e in events) == run.steps
    assert not run.transcript.filter(role="assistant").exists()  # nothing else of it is kept


def test_the_late_usage_is_written_whole_or_not_at_all(owner):
    def broken(**kwargs):
        raise RuntimeError("the event could not be written")

    late_usage_recorded.connect(broken, dispatch_uid="test.broken")
    try:
        run, _ = _reaped_mid_call(owner)
    finally:
        late_usage_recorded.disconnect(dispatch_uid="test.broken")

    assert (run.status, run.failure_reason) == ("failed", "worker_lost")
    assert not LedgerEntry.objects.exists() and run.cost == 0 and run.steps == 0
    assert [e.event for e in AccountingEvent.objects.filter(run_id=run.pk)] == ["schedule.run_accounted"]
