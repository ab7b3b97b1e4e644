"""A step is written before a tool that waits (http.fetch) runs; otherwise with what follows it:
its instant tools' results (clock.now) and the next call's opening in one statement, or the run's
end. When the next call is on the wire, the step, its charge and its tool results are all
recorded, and that call is the run's open call. However the run ends, every step is charged."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.models import LedgerEntry
from runs.models import Run
from tests.factories import limits
from tests.runs.wire import FETCH, OPENAI, WIRES, Provider, execute, ledger_total, make_wire_agent, news_page

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("example_com_allowed")]


def _recorded() -> dict[str, Any]:
    """What the database holds for the run in flight, as the reaper or the run page would read it."""
    run = Run.objects.get(status=Run.Status.RUNNING, parent=None)
    return {
        "steps": run.steps,
        "tool_calls": run.tool_calls,
        "entries": LedgerEntry.objects.filter(run_id=run.pk).count(),
        "cost": run.cost,
        "open_call": (run.open_call or {}).get("id"),
        "tool_results": list(run.transcript.filter(role="tool").values_list("content", flat=True)),
    }


def _seen_then(seen: list[dict[str, Any]], reply: dict[str, Any]) -> Any:
    def answer(request: httpx.Request) -> dict[str, Any]:
        seen.append(_recorded())
        return reply

    return answer


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_when_the_call_after_an_instant_tool_is_sent_its_step_and_result_are_recorded(owner, wire):
    seen: list[dict[str, Any]] = []
    provider = Provider(
        wire.tools(("clock_now", {}), usage=(10_000, 200)),
        _seen_then(seen, wire.answer(usage=(12_000, 300))),
    )
    agent = make_wire_agent(wire, tools=["clock.now"], input_price="2.50", output_price="10.00")

    with CaptureQueriesContext(connection) as queries:
        run = execute(owner, agent, provider)

    (at_second_call,) = seen
    assert at_second_call["steps"] == 1 and at_second_call["tool_calls"] == 1
    assert at_second_call["entries"] == 1 and at_second_call["cost"] == Decimal("0.027000")
    assert at_second_call["open_call"]  # the call on the wire is the run's open call
    assert len(at_second_call["tool_results"]) == 1 and "Europe" in at_second_call["tool_results"][0]
    assert run.status == "completed" and (run.steps, run.tool_calls) == (2, 1)
    assert run.cost == Decimal("0.060000") == ledger_total(run) and run.open_call is None
    statements = [q["sql"].lstrip() for q in queries.captured_queries]
    opens = [sql for sql in statements if sql.startswith("WITH relaxed AS")]
    assert len(opens) == 1  # the first call's; the second was opened with the step before it
    assert sum(sql.startswith("WITH ours AS") for sql in statements) == 2


def test_a_step_whose_tool_waits_is_recorded_before_the_tool_runs(owner):
    seen: list[dict[str, Any]] = []

    def page(request: httpx.Request) -> httpx.Response:
        seen.append(_recorded())
        return news_page(request)

    provider = Provider(OPENAI.tools(FETCH, usage=(10_000, 200)), OPENAI.answer(), web=page)
    run = execute(owner, make_wire_agent(OPENAI, tools=["http.fetch"]), provider)

    (during_fetch,) = seen
    assert during_fetch["steps"] == 1 and during_fetch["entries"] == 1 and during_fetch["cost"] > 0
    assert during_fetch["open_call"] is None and during_fetch["tool_results"] == []
    assert run.status == "completed" and run.cost == ledger_total(run)


def test_a_run_out_of_model_calls_after_an_instant_tool_still_charges_its_step_and_keeps_the_result(owner):
    provider = Provider(OPENAI.tools(("clock_now", {}), ("clock_now", {}), usage=(10_000, 200)))
    agent = make_wire_agent(OPENAI, tools=["clock.now"], input_price="2.50", output_price="10.00")

    run = execute(owner, agent, provider, limits=limits(max_model_calls=1))

    assert run.status == "failed" and run.failure_reason == "budget_exhausted"
    assert (run.steps, run.model_calls, run.tool_calls) == (1, 1, 2) and len(provider.requests) == 1
    assert run.cost == Decimal("0.027000") == ledger_total(run) and run.open_call is None
    assert run.transcript.filter(role="tool").count() == 2


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_run_whose_next_call_no_longer_fits_after_an_instant_tool_still_charges_its_step(owner, wire):
    # As for a fetch (test_runtime): USD 0.60 charged, the next call would cost USD 0.45 at worst,
    # USD 0.40 is left; here the tool answered at once, so the step was still pending.
    provider = Provider(wire.tools(("clock_now", {}), usage=(150_000, 10_000)))
    agent = make_wire_agent(wire, tools=["clock.now"])

    run = execute(owner, agent, provider, limits=limits(max_cost="1.00", max_tool_calls=20))

    assert (run.status, run.failure_reason, run.failure_dimension) == ("failed", "budget_exhausted", "cost")
    assert run.cost == Decimal("0.60") == ledger_total(run) and len(provider.requests) == 1
    assert (run.steps, run.tool_calls) == (1, 1) and run.transcript.filter(role="tool").count() == 1
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 1 and run.open_call is None
