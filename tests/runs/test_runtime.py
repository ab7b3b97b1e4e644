"""The run loop around the model: usage recorded atomically in the ledger, the hard cost limit,
cancellation and time limits, interactive defaults, and the transcript stored with the run."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
import time_machine

from accounting.models import LedgerEntry
from runs.models import Run, TranscriptEntry
from runs.runtime import execute_run
from runs.services import cancel_run, claim_run, delete_conversation, fail_lost_runs
from tests.factories import limits, make_agent, make_schedule, materialize, start_interactive_run
from tests.runs.wire import (
    ANTHROPIC,
    FETCH,
    OPENAI,
    WIRES,
    Provider,
    execute,
    ledger_total,
    make_wire_agent,
    news_page,
    until_told,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("example_com_allowed")]


def _running() -> Run:
    return Run.objects.get(status=Run.Status.RUNNING, parent=None)


# -- usage and the ledger -------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_each_response_is_one_ledger_entry_priced_at_the_agents_rates(owner, wire):
    provider = Provider(
        wire.tools(("clock_now", {}), usage=(10_000, 200)),
        wire.tools(("clock_now", {}), usage=(12_000, 300)),
        wire.answer(usage=(15_000, 1_000)),
    )
    agent = make_wire_agent(wire, input_price="2.50", output_price="10.00")
    run = execute(owner, agent, provider)

    entries = list(LedgerEntry.objects.filter(run_id=run.pk).order_by("id"))
    assert [(e.input_tokens, e.output_tokens, e.cost) for e in entries] == [
        (10_000, 200, Decimal("0.027000")),
        (12_000, 300, Decimal("0.033000")),
        (15_000, 1_000, Decimal("0.047500")),
    ]
    assert {(e.owner_id, e.provider, e.model, e.schedule_id) for e in entries} == {
        (owner.pk, wire.provider, wire.model, None)
    }
    assert (run.steps, run.model_calls, run.tool_calls) == (3, 3, 2)
    assert run.cost == Decimal("0.107500") == ledger_total(run)


def test_a_scheduled_runs_ledger_entries_name_its_schedule(owner):
    schedule = make_schedule(owner, make_wire_agent(OPENAI))
    occurrence = materialize(schedule)
    with Provider(OPENAI.tools(("clock_now", {})), OPENAI.answer()).client() as client:
        run = execute_run(occurrence.run, client=client, sleep=lambda s: None)

    assert run.status == "completed"
    assert set(LedgerEntry.objects.filter(run_id=run.pk).values_list("schedule_id", flat=True)) == {
        schedule.pk
    }


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_usage_and_counters_agree_at_every_request(owner, wire):
    seen: list[tuple[int, int, Decimal, Decimal]] = []
    reply = until_told(wire, FETCH, usage=(31_337, 777))

    def observe(request):
        run = _running()
        entries = LedgerEntry.objects.filter(run_id=run.pk)
        seen.append((run.model_calls, entries.count(), run.cost, ledger_total(run)))
        return reply(request)

    run = execute(
        owner,
        make_wire_agent(wire, tools=["http.fetch"]),
        Provider(observe, web=news_page),
        limits=limits(max_steps=5, synthesis_reserve_steps=1),
    )

    assert run.status == "completed"
    assert [(calls, count) for calls, count, _, _ in seen] == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    assert all(cost == total for _, _, cost, total in seen)
    assert run.cost == ledger_total(run)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_call_whose_worst_case_no_longer_fits_is_never_made(owner, wire):
    # The first call reports 150,000 input tokens (USD 0.60 in all): the next one would carry at
    # least as much input, USD 0.45 at worst, and only USD 0.40 is left.
    provider = Provider(wire.tools(FETCH, usage=(150_000, 10_000)), web=news_page)
    run = execute(
        owner,
        make_wire_agent(wire, tools=["http.fetch"]),
        provider,
        limits=limits(max_cost="1.00", max_tool_calls=20),
    )

    assert (run.status, run.failure_reason, run.failure_dimension) == ("failed", "budget_exhausted", "cost")
    assert run.cost == Decimal("0.60") == ledger_total(run) <= Decimal("1.00")
    assert len(provider.requests) == 1
    assert "cannot pay for a call of 256 output tokens" in run.failure_message


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_provider_that_bills_beyond_the_calls_bound_is_recorded_as_billed_and_the_run_stops(
    owner, wire, caplog
):
    # A small request cannot honestly be 150,000 tokens: this provider ignores the bound. What it
    # billed is what the ledger records, it is logged, and no further call is made.
    provider = Provider(
        wire.tools(("clock_now", {}), usage=(150_000, 10_000)), wire.answer(usage=(150_000, 10_000))
    )
    run = execute(owner, make_wire_agent(wire), provider, limits=limits(max_cost="0.50"))

    assert (run.status, run.failure_reason, run.failure_dimension) == ("failed", "budget_exhausted", "cost")
    assert run.cost == Decimal("0.60") == ledger_total(run)
    assert len(provider.requests) == 1
    assert "billed more than the call's bound" in caplog.text


# -- cancellation, time limit, lost workers -------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_run_cancelled_during_a_request_stops_before_its_next_request(owner, wire):
    reply = until_told(wire, ("clock_now", {}))

    def cancel_on_second(request):
        if len(provider.requests) == 2:
            assert cancel_run(_running())
        return reply(request)

    provider = Provider(cancel_on_second)
    run = execute(owner, make_wire_agent(wire), provider)

    assert (run.status, run.failure_reason, run.answer) == ("cancelled", "", "")
    assert run.finished_at is not None
    assert len(provider.requests) == 2
    assert run.model_calls == 2 and ledger_total(run) == run.cost  # the answered call is still accounted


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_run_cancelled_by_one_of_its_tools_stops_before_its_next_request(owner, wire):
    def page_then_cancel(request):
        cancel_run(_running())
        return news_page(request)

    provider = Provider(until_told(wire, FETCH), web=page_then_cancel)
    run = execute(owner, make_wire_agent(wire, tools=["http.fetch"]), provider)

    assert run.status == "cancelled"
    assert len(provider.requests) == 1 and len(provider.fetches) == 1


def test_a_run_cancelled_while_waiting_to_retry_makes_no_further_attempt(owner):
    provider = Provider(httpx.Response(529, json=ANTHROPIC.error("overloaded_error", "Overloaded")))
    run = start_interactive_run(owner.pk, make_wire_agent(ANTHROPIC), "Research this.")
    claim_run(run)
    with provider.client() as client:
        run = execute_run(run, client=client, sleep=lambda seconds: cancel_run(_running()))

    assert (run.status, run.failure_reason) == ("cancelled", "")
    assert len(provider.requests) == 1


def test_cancelling_a_parent_cancels_its_delegated_child_and_both_stop(owner):
    task = "Collect supporting evidence for the briefing."

    def reply(request):
        body = json.loads(request.content)
        if OPENAI.first_prompt(body) == task:
            cancel_run(_running())  # the parent, from inside its child's request
            return OPENAI.tools(("clock_now", {}))
        return OPENAI.tools(("agent_delegate", {"task": task}))

    provider = Provider(reply)
    run = execute(owner, make_wire_agent(OPENAI, tools=["agent.delegate", "clock.now"]), provider)
    child = Run.objects.get(parent=run)

    assert (run.status, child.status) == ("cancelled", "cancelled")
    assert len(provider.requests) == 2


def test_a_run_past_its_time_limit_fails_with_timeout_before_its_next_request(owner, settings):
    settings.RUN_MAX_SECONDS = 60
    later = time_machine.travel(datetime.now(UTC) + timedelta(minutes=5), tick=False)

    def slow(request):
        later.start()
        return OPENAI.tools(("clock_now", {}))

    provider = Provider(slow)
    try:
        run = execute(owner, make_wire_agent(OPENAI), provider)
    finally:
        later.stop()

    assert (run.status, run.failure_reason, run.error_class) == ("failed", "timeout", "RunTimeout")
    assert "60 s" in run.failure_message
    assert len(provider.requests) == 1


def test_a_run_reaped_as_lost_stops_and_keeps_its_worker_lost_failure(owner):
    def reaped(request):
        assert fail_lost_runs(now=datetime.now(UTC) + timedelta(hours=1)) == [_running().pk]
        return OPENAI.tools(("clock_now", {}))

    provider = Provider(reaped, OPENAI.answer())
    run = execute(owner, make_wire_agent(OPENAI), provider)

    assert (run.status, run.failure_reason, run.error_class) == ("failed", "worker_lost", "WorkerLost")
    assert len(provider.requests) == 1


# -- interactive defaults (docs/decisions/0001, amendment)
# --------------------------------------------------------------


def test_an_interactive_run_without_limits_gets_the_default_reserves(owner):
    run = start_interactive_run(owner.pk, make_agent(max_steps=8, max_model_calls=9, max_cost="4.00"), "Hi")

    assert run.run_limits == limits(
        max_steps=8,
        max_model_calls=9,
        max_cost="4.00",
        synthesis_reserve_steps=1,
        synthesis_reserve_model_calls=1,
        synthesis_reserve_tool_calls=0,
        synthesis_reserve_cost="0.40",
    )


def test_the_agents_finite_cost_limit_caps_the_interactive_default(owner):
    run = start_interactive_run(owner.pk, make_agent(cost_limit="2.00", max_cost="5.00"), "Hi")

    assert (run.run_limits.max_cost, run.run_limits.synthesis_reserve_cost) == (
        Decimal("2.00"),
        Decimal("0.20"),
    )


def test_an_interactive_default_reserve_is_kept_only_below_its_total(owner):
    run = start_interactive_run(owner.pk, make_agent(max_steps=1, max_model_calls=1), "Hi")

    assert (run.run_limits.synthesis_reserve_steps, run.run_limits.synthesis_reserve_model_calls) == (0, 0)
    assert run.run_limits.synthesis_reserve_cost == Decimal("0.50")


def test_the_interactive_defaults_are_settings(owner, settings):
    settings.INTERACTIVE_RESERVE_STEPS = 3
    settings.INTERACTIVE_RESERVE_MODEL_CALLS = 2
    settings.INTERACTIVE_RESERVE_TOOL_CALLS = 1
    settings.INTERACTIVE_RESERVE_COST_FRACTION = Decimal("0.25")
    reserved = start_interactive_run(owner.pk, make_agent(), "Hi").run_limits

    assert (
        reserved.synthesis_reserve_steps,
        reserved.synthesis_reserve_model_calls,
        reserved.synthesis_reserve_tool_calls,
        reserved.synthesis_reserve_cost,
    ) == (3, 2, 1, Decimal("1.25"))


def test_limits_given_by_the_caller_are_used_as_they_are(owner):
    given = limits(max_steps=3)
    assert start_interactive_run(owner.pk, make_agent(), "Hi", limits=given).run_limits == given


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_interactive_run_with_default_limits_answers_on_its_reserved_last_step(owner, wire):
    provider = Provider(until_told(wire, ("clock_now", {})))
    run = execute(owner, make_wire_agent(wire, max_steps=4, max_tool_calls=20), provider)

    assert run.status == "completed"
    assert (run.steps, run.synthesis_dimension, run.synthesis_step) == (4, "steps", 4)


# -- the transcript -------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_steps_and_tool_calls_are_stored_with_the_run_and_deleted_with_its_conversation(owner, wire):
    provider = Provider(wire.tools(("clock_now", {}), ("clock_now", {})), wire.answer())
    run = execute(owner, make_wire_agent(wire), provider)

    entries = list(TranscriptEntry.objects.filter(run=run).values_list("seq", "step", "role", "tool_name"))
    assert entries == [
        (0, 0, "user", ""),
        (1, 1, "assistant", ""),
        (2, 1, "tool", "clock_now"),
        (3, 1, "tool", "clock_now"),
        (4, 2, "assistant", ""),
    ]
    calls = TranscriptEntry.objects.get(run=run, seq=1).tool_calls
    assert [call["name"] for call in calls] == ["clock_now", "clock_now"]

    delete_conversation(run.conversation)

    assert not TranscriptEntry.objects.filter(run_id=run.pk).exists()
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 2


def test_a_run_handed_a_deadline_that_has_passed_stops_before_its_first_request(owner):
    """A delegated child gets its parent's deadline, not a fresh time limit of its own."""
    import time as clock

    from runs.runtime import execute_run
    from runs.services import claim_run

    run = start_interactive_run(owner.pk, make_agent(model="sim-research"), "Research.")
    claim_run(run)
    finished = execute_run(run, heartbeat=False, deadline=clock.time() - 1)
    assert (finished.failure_reason, finished.error_class) == ("timeout", "RunTimeout")
    assert finished.model_calls == 0


def test_the_time_limit_is_checked_before_each_tool_call(owner, settings):
    import time_machine

    from runs.providers import simulated
    from runs.runtime import execute_run
    from runs.services import claim_run

    settings.RUN_MAX_SECONDS = 60
    run = start_interactive_run(owner.pk, make_agent(model="sim-research"), "Research.")
    claim_run(run)
    with time_machine.travel(run.started_at, tick=True) as traveller:

        def slow_provider(request: httpx.Request) -> httpx.Response:
            traveller.shift(61)  # the answer arrives after the time limit
            return simulated.transport().handle_request(request)

        finished = execute_run(
            run, client=httpx.Client(transport=httpx.MockTransport(slow_provider)), heartbeat=False
        )
    assert (finished.failure_reason, finished.model_calls, finished.tool_calls) == ("timeout", 1, 0)
    assert not TranscriptEntry.objects.filter(
        run=run, role="tool", is_error=False
    ).exists()  # the tool never ran


def test_an_interactive_run_is_admitted_like_any_run(owner):
    from accounting import ledger
    from accounting.models import Reservation

    agent = make_agent(model="sim-research")
    admitted = start_interactive_run(owner.pk, agent, "Research.")
    assert Reservation.objects.get(run_id=admitted.pk).amount == Decimal("5.00")
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = Decimal("7.00")
    budget.save()
    refused = start_interactive_run(owner.pk, agent, "And more.")
    assert (refused.status, refused.failure_reason, refused.failure_dimension) == (
        "failed",
        "admission_denied",
        "daily",
    )


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_response_arriving_after_a_cancel_is_still_accounted_and_the_loop_stops(owner, wire):
    """The owner cancels while the provider is answering: the answer's usage is recorded against
    the run (money was spent), nothing else of it is kept, and the run stays cancelled."""

    def answer_after_a_cancel(request: httpx.Request):
        cancel_run(_running())
        return wire.tools(("clock_now", {}))

    provider = Provider(answer_after_a_cancel)
    run = execute(owner, make_wire_agent(wire), provider)

    assert run.status == "cancelled" and len(provider.requests) == 1
    assert (run.steps, run.model_calls) == (1, 1) and run.cost == ledger_total(run) > 0
    assert not run.transcript.filter(role="assistant").exists()


def test_one_step_is_one_round_trip(owner, django_assert_max_num_queries):
    """Per step: the status check before the request and the write after it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    provider = Provider(OPENAI.tools(("clock_now", {})), OPENAI.tools(("clock_now", {})), OPENAI.answer())
    with CaptureQueriesContext(connection) as queries:
        run = execute(owner, make_wire_agent(OPENAI), provider)
    assert run.status == "completed" and run.steps == 3
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith("WITH ours AS")]
    assert len(writes) == run.steps
    checks = [
        q for q in queries.captured_queries if 'FROM "runs_run"' in q["sql"] and "SELECT" in q["sql"][:12]
    ]
    assert len(checks) <= run.steps + 2  # one status check per step (and the claim/finish reads)
