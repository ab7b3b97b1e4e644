"""Properties of the run loop over random valid limits and random model behaviour: a scripted
provider that, per request, answers or asks for 0-3 tool calls, may ignore the synthesis
instruction, and reports random bounded usage. Every example is a real run on the database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting.models import LedgerEntry
from runs.limits import DIMENSIONS, RunLimits
from runs.models import Run, TranscriptEntry
from runs.runtime import execute_run
from runs.services import claim_run
from tests.factories import start_interactive_run
from tests.runs.wire import (
    WIRES,
    Provider,
    Wire,
    ledger_total,
    make_wire_agent,
    mentions_instruction,
    text_bytes,
)

pytestmark = pytest.mark.django_db

PRICES = {"input_price": "3.00", "output_price": "15.00"}  # USD per million tokens
FETCH = ("http_fetch", {"url": "https://example.com/evidence"})
PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@dataclass(frozen=True)
class Turn:
    tool_calls: int  # 0: an answer
    obeys: bool  # answers when the request is synthesis-only
    input_tokens: int
    output_tokens: int

    @property
    def cost(self) -> Decimal:
        return (Decimal(self.input_tokens) * 3 + Decimal(self.output_tokens) * 15) / 1_000_000


turns = st.builds(
    Turn,
    tool_calls=st.integers(0, 3),
    obeys=st.booleans(),
    input_tokens=st.integers(0, 8_000),
    output_tokens=st.integers(0, 1_000),
)


@st.composite
def run_limits(draw: st.DrawFn) -> RunLimits:
    totals = {
        "max_steps": draw(st.integers(1, 8)),
        "max_model_calls": draw(st.integers(1, 8)),
        "max_tool_calls": draw(st.integers(0, 6)),
        "max_cost": draw(st.decimals(Decimal("0.01"), Decimal("0.30"), places=3)),
    }

    def reserve(total: int) -> int:
        return draw(st.integers(0, total - 1)) if total > 1 and draw(st.booleans()) else 0

    cost_reserve = Decimal(0)
    if draw(st.booleans()):
        cost_reserve = draw(st.decimals(Decimal(0), totals["max_cost"] - Decimal("0.001"), places=3))
    return RunLimits(
        **totals,
        synthesis_reserve_steps=reserve(totals["max_steps"]),
        synthesis_reserve_model_calls=reserve(totals["max_model_calls"]),
        synthesis_reserve_tool_calls=reserve(totals["max_tool_calls"]),
        synthesis_reserve_cost=cost_reserve,
    )


@dataclass
class Observed:
    run: Run
    provider: Provider
    before_each_request: list[dict[str, int | Decimal]]


def _execute(owner, wire: Wire, run_limits: RunLimits, script: list[Turn]) -> Observed:
    agent = make_wire_agent(wire, tools=["http.fetch"], **PRICES)
    run = start_interactive_run(owner.pk, agent, "Research and brief me.", limits=run_limits)
    claim_run(run)
    before: list[dict[str, int | Decimal]] = []

    counted = {"input": 0, "bytes": 0}  # what the previous request was counted as, and its bytes

    def model(request: httpx.Request) -> dict:
        before.append(Run.objects.get(pk=run.pk).usage())
        turn = script[min(len(before), len(script)) - 1]
        body = json.loads(request.content)
        synthesis_only = wire.is_synthesis_only(body)
        # A provider as the bound assumes one (docs/contract.md#bounded-before-the-call): no more
        # input tokens than the request has bytes, and the part it counted last time counted the
        # same now (a prompt reported as 0 tokens cannot come back as 600 with a sentence added).
        sent = text_bytes(body)
        consistent = counted["input"] + max(0, sent - counted["bytes"])
        usage = wire.honest(body, min(turn.input_tokens, consistent), turn.output_tokens)  # and the cap
        counted.update(input=usage[0], bytes=sent)
        if turn.tool_calls == 0 or (synthesis_only and turn.obeys):
            return wire.answer(usage=usage)
        return wire.tools(*[FETCH] * turn.tool_calls, usage=usage)

    provider = Provider(model, web=lambda request: httpx.Response(200, text="evidence"))
    with provider.client() as client:
        finished = execute_run(run, client=client, sleep=lambda seconds: None)
    return Observed(finished, provider, before)


@pytest.fixture(autouse=True)
def _example_com_is_allowed(settings):
    settings.HTTP_FETCH_ALLOWED_HOSTS = ["example.com"]


@PROPERTY_SETTINGS
@given(wire=st.sampled_from(WIRES), run_limits=run_limits(), script=st.lists(turns, min_size=1, max_size=10))
def test_the_loop_keeps_every_hard_limit_and_accounts_for_every_call(owner, wire, run_limits, script):
    seen = _execute(owner, wire, run_limits, script)
    run = seen.run

    assert run.status in ("completed", "failed")
    assert run.failure_reason in ("", "budget_exhausted", "synthesis_reserve_violation")
    # Never more tool executions than max_tool_calls.
    assert len(seen.provider.fetches) == run.tool_calls <= run_limits.max_tool_calls
    # Never a model request after a hard limit is used up.
    for usage in seen.before_each_request:
        assert usage["steps"] < run_limits.max_steps
        assert usage["model_calls"] < run_limits.max_model_calls
        assert usage["cost"] < run_limits.max_cost
    # Every response is one ledger entry; the ledger and the run agree.
    assert len(seen.provider.requests) == run.model_calls == run.steps
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == run.model_calls
    assert ledger_total(run) == run.cost
    # The bill never crosses the cost limit (docs/contract.md#dollars-as-billed): every call was bounded
    # before it was made.
    assert run.cost <= run_limits.max_cost
    # A budget failure names a dimension that is really used up, or (cost) one whose dollars left
    # cannot pay for a call of MIN_OUTPUT_TOKENS.
    if run.failure_reason == "budget_exhausted" and run.failure_dimension != "cost":
        assert run.used(run.failure_dimension) >= run_limits.total(run.failure_dimension)


@PROPERTY_SETTINGS
@given(wire=st.sampled_from(WIRES), run_limits=run_limits(), script=st.lists(turns, min_size=1, max_size=10))
def test_the_instruction_never_reaches_stored_history(owner, wire, run_limits, script):
    seen = _execute(owner, wire, run_limits, script)

    assert not mentions_instruction(list(TranscriptEntry.objects.filter(run=seen.run).values()))
    assert not mentions_instruction(seen.run.answer)
    for body in seen.provider.bodies:
        assert not mentions_instruction(wire.conversation(body))
        assert mentions_instruction(body) == wire.is_synthesis_only(body)
    synthesis_requests = [wire.is_synthesis_only(body) for body in seen.provider.bodies]
    # A synthesis-only turn is the run's last (it answers or fails closed); the run records it.
    if any(synthesis_requests):
        assert synthesis_requests.count(True) == 1 and synthesis_requests[-1]
        assert seen.run.synthesis_step == len(synthesis_requests)
        assert seen.run.synthesis_dimension in DIMENSIONS
    else:
        assert (seen.run.synthesis_dimension, seen.run.synthesis_step) == ("", None)


@PROPERTY_SETTINGS
@given(
    wire=st.sampled_from(WIRES),
    run_limits=run_limits().filter(lambda limits: limits.has_reserves),
    script=st.lists(
        turns.map(lambda turn: Turn(turn.tool_calls, True, turn.input_tokens, turn.output_tokens)),
        min_size=1,
        max_size=10,
    ),
)
def test_with_reserves_and_an_obedient_model_a_run_never_runs_out_of_a_reserved_dimension(
    owner, wire, run_limits, script
):
    largest_call = max(turn.cost for turn in script)
    if run_limits.synthesis_reserve_cost > 0 and largest_call >= run_limits.synthesis_reserve_cost:
        return  # the ADR sizes the cost reserve above the final call's cost; this one is not
    seen = _execute(owner, wire, run_limits, script)
    run = seen.run

    reserved = {d for d in DIMENSIONS if run_limits.reserve(d) > 0}
    if run.failure_reason == "budget_exhausted" and run.failure_dimension in reserved:
        # Only a cost reserve smaller than the final call's worst case (its input bound and
        # MIN_OUTPUT_TOKENS of output, which the script's reported costs above do not show) can
        # end a run so; and then the reserve was still whole: no turn before it spent into it.
        assert run.failure_dimension == "cost", run.failure_message
        assert run_limits.max_cost - run.cost >= run_limits.synthesis_reserve_cost, run.failure_message
    assert run.failure_reason != "synthesis_reserve_violation"
    if run.synthesis_dimension:
        assert run.status == "completed"
