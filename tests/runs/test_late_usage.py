"""A call on the wire when its run is stopped or reaped still cost money: whoever ends the run charges
the call's bound (the provider may have generated up to its cap), in the transaction that ends it, so
the ledger, the run's counters and its content-free accounting event agree; the response, if it comes
after all, is not charged again."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.utils import timezone

from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Run
from runs.services import cancel_run, fail_lost_runs
from runs.signals import run_finished
from schedules import execution
from tests.factories import make_schedule
from tests.runs.wire import OPENAI, Provider, make_wire_agent

pytestmark = pytest.mark.django_db


def _ended_mid_call(owner, end) -> tuple[Run, Provider]:
    """A scheduled run that `end`s (reaped, or stopped) while its first provider call is out (as if
    its worker was frozen past its lease, or the stream could not be cut): the response then
    arrives anyway."""
    schedule = make_schedule(owner, make_wire_agent(OPENAI))
    enqueued: list[int] = []
    execution.materialize_due(enqueue=enqueued.extend, now=schedule.next_occurrence_at + timedelta(seconds=1))

    def ended_then_answered(request: httpx.Request) -> dict:
        end(Run.objects.get())
        return OPENAI.tools(("clock_now", {}), usage=(4000, 500))

    provider = Provider(ended_then_answered)
    with provider.client() as client:
        execution.execute_occurrence(enqueued[0], client=client, sleep=lambda s: None)
    return Run.objects.get(), provider


def _reaped(run: Run) -> None:
    assert fail_lost_runs(now=timezone.now() + timedelta(hours=1)) == [run.pk]  # the lease ran out long ago


def test_a_call_out_when_its_run_is_reaped_is_charged_its_bound_once(owner):
    run, provider = _ended_mid_call(owner, _reaped)

    assert (run.status, run.failure_reason) == ("failed", "worker_lost")
    assert len(provider.requests) == 1
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)  # the late response is not charged again
    bound = entry.prices["bound"]
    assert entry.estimated and (entry.input_tokens, entry.output_tokens) == (
        bound["input_tokens"],
        bound["output_cap"],
    )
    assert entry.cost == Decimal(bound["worst"]) == run.cost <= run.run_limits.max_cost
    assert (run.steps, run.model_calls, run.tool_calls) == (1, 1, 0)
    events = list(AccountingEvent.objects.filter(run_id=run.pk).order_by("id"))
    assert [e.event for e in events] == ["schedule.run_accounted"]  # the charge is in its usage
    assert Decimal(events[0].payload["usage"]["cost"]) == run.cost
    assert not run.open_call and not run.transcript.filter(role="assistant").exists()


def test_a_call_out_when_its_run_is_stopped_is_charged_its_bound_once(owner):
    run, provider = _ended_mid_call(owner, cancel_run)

    assert run.status == "cancelled"
    assert len(provider.requests) == 1
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)  # the late answer is not charged again
    assert entry.estimated and "stopped" in entry.prices["basis"]
    assert entry.cost == Decimal(entry.prices["bound"]["worst"]) == run.cost <= run.run_limits.max_cost
    assert (run.steps, run.model_calls, run.tool_calls) == (1, 1, 0)
    events = list(AccountingEvent.objects.filter(run_id=run.pk).order_by("id"))
    assert [e.event for e in events] == ["schedule.run_accounted"]
    assert Decimal(events[0].payload["usage"]["cost"]) == run.cost  # told with the run's end
    assert not run.open_call and not run.transcript.filter(role="assistant").exists()


def test_the_charge_of_an_ended_call_is_written_with_the_end_or_not_at_all(owner):
    def broken(**kwargs):
        raise RuntimeError("the outcome could not be written")

    run_finished.connect(broken, dispatch_uid="test.broken")
    try:
        with pytest.raises(RuntimeError):
            _ended_mid_call(owner, cancel_run)
    finally:
        run_finished.disconnect(dispatch_uid="test.broken")

    run = Run.objects.get()
    assert run.status == "running" and run.open_call  # nothing of the stop was written
    assert not LedgerEntry.objects.exists() and run.cost == 0 and run.steps == 0
    assert not AccountingEvent.objects.filter(run_id=run.pk).exists()
