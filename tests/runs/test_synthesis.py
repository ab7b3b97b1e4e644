"""docs/decisions/0001 (as amended by docs/decisions/0001, amendment): synthesis reserves for every run
kind, the volatile platform-trusted instruction, failing closed on tool calls inside the reserve, and the
tool-call budget that owes one synthesis-only turn. Every run goes through the real adapters."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import pytest

from accounting.models import LedgerEntry
from runs.models import Run, TranscriptEntry
from runs.providers.base import SYNTHESIS_INSTRUCTION
from runs.runtime import execute_run
from runs.transcript import TOOL_BUDGET_EXHAUSTED
from tests.factories import limits, make_schedule, materialize
from tests.runs.wire import (
    ANTHROPIC,
    FETCH,
    OPENAI,
    WIRES,
    Provider,
    execute,
    ledger_total,
    make_wire_agent,
    mentions_instruction,
    news_page,
    told_to_synthesize,
    until_told,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("example_com_allowed")]


def _fetcher(wire, **limit_overrides):
    return make_wire_agent(
        wire, tools=["http.fetch", "clock.now"], max_output_tokens=LONG_ANSWER, **limit_overrides
    )


LONG_ANSWER = 4096  # the agent's maximum output per call: room for the 4,000 tokens it means to write
# Dear output: 4,000 output tokens cost USD 0.60, whatever the (small) input.
DEAR = {"input_price": "3.00", "output_price": "150.00"}


def _entries(run) -> list[Decimal]:
    return list(LedgerEntry.objects.filter(run_id=run.pk).order_by("id").values_list("cost", flat=True))


# -- docs/decisions/0001 consequences ------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_scheduled_research_run_near_its_budget_writes_its_answer_instead_of_failing(owner, wire):
    # schedule.create pins USD 5 with a USD 1 reserve; a full call costs about USD 0.60. Turns that
    # are not synthesis-only may spend only the dollars outside the reserve: as those run out the
    # output cap shrinks, the turn that no longer fits is cut, and the owed synthesis turn follows
    # with the reserve whole.
    agent = _fetcher(wire, max_steps=20, max_model_calls=20, max_tool_calls=20, **DEAR)
    occurrence = materialize(make_schedule(owner, agent))
    provider = Provider(until_told(wire, FETCH, usage=(150_000, 4_000), honest=True), web=news_page)
    with provider.client() as client:
        run = execute_run(occurrence.run, client=client, sleep=lambda s: None)

    synthesis_only = [wire.is_synthesis_only(body) for body in provider.bodies]
    assert run.status == "completed"
    assert run.answer == "Final answer from the evidence gathered."
    assert run.synthesis_dimension == "cost" and synthesis_only == [False] * (len(synthesis_only) - 1) + [
        True
    ]
    assert run.cost == ledger_total(run) <= Decimal("5.00")
    costs = _entries(run)
    assert sum(costs[:-1]) <= Decimal("4.00")  # the turns before it left the USD 1 reserve untouched
    assert wire.output_cap(provider.bodies[-1]) == LONG_ANSWER  # a full answer fits


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_same_research_run_without_a_reserve_fails_at_its_cost_limit_without_an_answer(owner, wire):
    agent = _fetcher(wire, **DEAR)
    provider = Provider(until_told(wire, FETCH, usage=(150_000, 4_000), honest=True), web=news_page)
    run = execute(owner, agent, provider, limits=limits(max_steps=20, max_model_calls=20, max_tool_calls=20))

    assert (run.status, run.failure_reason, run.error_class, run.failure_dimension) == (
        "failed",
        "budget_exhausted",
        "BudgetExhausted",
        "cost",
    )
    assert run.answer == ""
    assert run.cost == ledger_total(run) <= Decimal("5.00")  # never crossed: each call was bounded first
    assert "cut at" in run.failure_message  # the last call's output stopped at what the dollars paid for
    last = TranscriptEntry.objects.filter(run=run, role="assistant").order_by("-seq").first()
    assert last is not None and last.content == "Partial answer"  # its partial text is kept


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_research_run_near_its_step_limit_answers_on_its_last_step(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = execute(
        owner,
        _fetcher(wire),
        provider,
        limits=limits(max_steps=5, max_tool_calls=20, synthesis_reserve_steps=1),
    )

    assert run.status == "completed"
    assert (run.steps, run.tool_calls) == (5, 4)
    assert (run.synthesis_dimension, run.synthesis_step) == ("steps", 5)


RESERVES = [
    # (dimension, limits, the synthesis-only step, tool executions before it)
    ("steps", limits(max_steps=4, max_tool_calls=20, synthesis_reserve_steps=1), 4, 3),
    ("model_calls", limits(max_model_calls=3, max_tool_calls=20, synthesis_reserve_model_calls=1), 3, 2),
    ("tool_calls", limits(max_tool_calls=3, synthesis_reserve_tool_calls=1), 3, 2),
    # USD 0.30 a call: the second call's cap leaves the USD 0.50 reserve whole, so it is cut
    # short (no tool runs from it) and the third is the owed synthesis turn.
    ("cost", limits(max_cost="1.00", max_tool_calls=20, synthesis_reserve_cost="0.50"), 3, 1),
]


def _ignores_the_instruction(wire):
    """Asks for a tool on every turn, synthesis-only or not; honest usage (USD 0.30 a full call)."""

    def reply(request):
        body = json.loads(request.content)
        used = wire.honest(body, 100_000, 2_000)
        return wire.cut(usage=used) if used[1] < 2_000 else wire.tools(FETCH, usage=used)

    return reply


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize(
    ("dimension", "run_limits", "step", "executed"), RESERVES, ids=[row[0] for row in RESERVES]
)
def test_a_provider_that_still_requests_tools_in_synthesis_only_mode_fails_closed_naming_the_dimension(
    owner, wire, dimension, run_limits, step, executed
):
    provider = Provider(_ignores_the_instruction(wire), web=news_page)
    run = execute(owner, _fetcher(wire, **DEAR), provider, limits=run_limits)

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "synthesis_reserve_violation",
        "SynthesisReserveViolation",
    )
    assert run.failure_dimension == dimension
    assert (run.synthesis_dimension, run.synthesis_step) == (dimension, step)
    assert dimension.replace("_", " ") in run.failure_message
    assert len(provider.requests) == step
    assert wire.is_synthesis_only(provider.bodies[-1])
    # No tool ran in the synthesis-only turn; the response itself was accounted.
    assert len(provider.fetches) == run.tool_calls == executed
    assert not TranscriptEntry.objects.filter(run=run, step=step, role="tool").exists()
    assert run.model_calls == step and ledger_total(run) == run.cost


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_exhausted_tool_budget_owes_one_synthesis_turn_and_a_tool_call_in_it_fails_closed(owner, wire):
    provider = Provider(wire.tools(FETCH), web=news_page)
    run = execute(owner, _fetcher(wire), provider, limits=limits(max_tool_calls=2))

    assert (run.failure_reason, run.failure_dimension) == ("synthesis_reserve_violation", "tool_calls")
    assert (run.synthesis_dimension, run.synthesis_step) == ("tool_calls", 3)
    assert len(provider.fetches) == 2
    assert [wire.is_synthesis_only(body) for body in provider.bodies] == [False, False, True]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_running_out_of_tool_calls_never_fails_a_run_by_itself(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = execute(owner, _fetcher(wire), provider, limits=limits(max_tool_calls=2))

    assert run.status == "completed"
    assert (run.steps, run.tool_calls) == (3, 2)
    assert (run.synthesis_dimension, run.synthesis_step) == ("tool_calls", 3)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_run_without_tool_calls_at_all_is_synthesis_only_from_its_first_request(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = execute(owner, _fetcher(wire), provider, limits=limits(max_tool_calls=0))

    assert run.status == "completed"
    assert (run.steps, run.tool_calls, run.synthesis_dimension, run.synthesis_step) == (1, 0, "tool_calls", 1)
    assert wire.is_synthesis_only(provider.bodies[0])


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_all_zero_reserves_behave_as_before_and_the_model_call_limit_fails_budget_exhausted(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = execute(
        owner, _fetcher(wire), provider, limits=limits(max_steps=10, max_model_calls=3, max_tool_calls=20)
    )

    assert (run.status, run.failure_reason, run.error_class, run.failure_dimension) == (
        "failed",
        "budget_exhausted",
        "BudgetExhausted",
        "model_calls",
    )
    assert "model calls limit" in run.failure_message
    assert (run.model_calls, run.tool_calls, len(provider.requests)) == (3, 3, 3)
    assert (run.synthesis_dimension, run.synthesis_step) == ("", None)
    assert not any(wire.is_synthesis_only(body) or mentions_instruction(body) for body in provider.bodies)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_all_zero_reserves_and_the_step_limit_fail_budget_exhausted_on_steps(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = execute(owner, _fetcher(wire), provider, limits=limits(max_steps=2, max_tool_calls=20))

    assert (run.failure_reason, run.failure_dimension) == ("budget_exhausted", "steps")
    assert len(provider.requests) == 2


# -- the volatile instruction ---------------------------------------------------------------------


def _reserved_run(owner, wire, provider, **kwargs):
    agent = _fetcher(wire)
    agent.system_prompt = "You are a careful research assistant."
    agent.save()
    return execute(
        owner,
        agent,
        provider,
        limits=limits(max_steps=3, max_tool_calls=20, synthesis_reserve_steps=1),
        **kwargs,
    )


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_instruction_is_in_exactly_one_request_in_a_system_position_with_tool_choice_none(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = _reserved_run(owner, wire, provider)

    assert run.status == "completed"
    bodies = provider.bodies
    assert [mentions_instruction(body) for body in bodies] == [False, False, True]
    assert wire.system_texts(bodies[2]) == ["You are a careful research assistant.", SYNTHESIS_INSTRUCTION]
    assert not mentions_instruction(wire.conversation(bodies[2]))  # never a user (or any history) message
    assert json.dumps(bodies[2]).count(SYNTHESIS_INSTRUCTION) == 1
    assert wire.is_synthesis_only(bodies[2]) and not any(wire.is_synthesis_only(b) for b in bodies[:2])
    assert bodies[2]["tools"] == bodies[1]["tools"]  # offered, but tool_choice none


def test_openai_gets_the_instruction_as_a_system_message_after_the_history(owner):
    provider = Provider(until_told(OPENAI, FETCH), web=news_page)
    _reserved_run(owner, OPENAI, provider)

    last = provider.bodies[2]["messages"][-1]
    assert last == {"role": "system", "content": SYNTHESIS_INSTRUCTION}
    assert provider.bodies[2]["tool_choice"] == "none"


def test_anthropic_gets_the_instruction_as_a_system_block(owner):
    provider = Provider(until_told(ANTHROPIC, FETCH), web=news_page)
    _reserved_run(owner, ANTHROPIC, provider)

    body = provider.bodies[2]
    assert body["system"][-1] == {"type": "text", "text": SYNTHESIS_INSTRUCTION}
    assert body["tool_choice"] == {"type": "none"}
    assert all(message["role"] in ("user", "assistant") for message in body["messages"])


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_instruction_is_never_stored_in_the_transcript(owner, wire):
    provider = Provider(until_told(wire, FETCH), web=news_page)
    run = _reserved_run(owner, wire, provider)

    entries = list(TranscriptEntry.objects.filter(run=run).values("role", "content", "tool_calls"))
    assert [entry["role"] for entry in entries] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert not mentions_instruction(entries)
    assert not mentions_instruction(list(Run.objects.filter(pk=run.pk).values()))


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_instruction_never_reaches_the_next_run_in_the_same_conversation(owner, wire):
    first = Provider(until_told(wire, FETCH), web=news_page)
    earlier = _reserved_run(owner, wire, first)
    later = Provider(wire.answer("A follow-up answer."))
    run = execute(
        owner, earlier.agent, later, prompt="And what about tomorrow?", conversation=earlier.conversation
    )

    assert run.status == "completed"
    body = later.bodies[0]
    history = [(m["role"], wire.text_of(m)) for m in wire.conversation(body)]
    assert history == [
        ("user", earlier.prompt),
        ("assistant", "Final answer from the evidence gathered."),
        ("user", "And what about tomorrow?"),
    ]
    assert not mentions_instruction(body)
    assert not wire.is_synthesis_only(body)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_retried_synthesis_request_carries_the_instruction_once_each_time(owner, wire):
    answer_or_tool = until_told(wire, FETCH)
    overloaded = httpx.Response(529, json=wire.error("overloaded_error", "Overloaded"))
    attempts = iter([overloaded, overloaded])

    def reply(request):
        if told_to_synthesize(request):
            failure = next(attempts, None)
            return failure if failure is not None else answer_or_tool(request)
        return answer_or_tool(request)

    provider = Provider(reply, web=news_page)
    run = _reserved_run(owner, wire, provider)

    assert run.status == "completed"
    assert [json.dumps(body).count(SYNTHESIS_INSTRUCTION) for body in provider.bodies] == [0, 0, 1, 1, 1]
    assert run.model_calls == 3


# -- tool calls beyond the budget -----------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_tool_calls_beyond_the_budget_get_an_error_result_and_the_next_request_is_synthesis_only(owner, wire):
    provider = Provider(wire.tools(FETCH, FETCH, FETCH), wire.answer(), web=news_page)
    run = execute(owner, _fetcher(wire), provider, limits=limits(max_tool_calls=2))

    assert run.status == "completed"
    assert (run.tool_calls, len(provider.fetches)) == (2, 2)
    results = list(TranscriptEntry.objects.filter(run=run, role="tool").values_list("content", "is_error"))
    assert [is_error for _, is_error in results] == [False, False, True]
    assert results[2][0] == TOOL_BUDGET_EXHAUSTED
    # The model sees the refusal and is told to answer.
    seen = wire.tool_results(provider.bodies[1])
    assert seen[2] == (TOOL_BUDGET_EXHAUSTED, True)
    assert wire.is_synthesis_only(provider.bodies[1]) and mentions_instruction(provider.bodies[1])
    assert (run.synthesis_dimension, run.synthesis_step) == ("tool_calls", 2)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_tool_calls_never_eat_into_the_tool_call_reserve(owner, wire):
    provider = Provider(wire.tools(FETCH, FETCH, FETCH, FETCH), wire.answer(), web=news_page)
    run = execute(
        owner, _fetcher(wire), provider, limits=limits(max_tool_calls=4, synthesis_reserve_tool_calls=2)
    )

    assert run.status == "completed"
    assert (run.tool_calls, len(provider.fetches)) == (2, 2)
    assert [is_error for _, is_error in wire.tool_results(provider.bodies[1])] == [False, False, True, True]
    assert (run.synthesis_dimension, run.synthesis_step) == ("tool_calls", 2)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_run_that_never_reaches_its_reserve_records_no_synthesis(owner, wire):
    provider = Provider(wire.tools(FETCH), wire.answer(), web=news_page)
    run = execute(owner, _fetcher(wire), provider, limits=limits(synthesis_reserve_steps=2))

    assert run.status == "completed"
    assert (run.synthesis_dimension, run.synthesis_step) == ("", None)
    assert not any(mentions_instruction(body) for body in provider.bodies)


# -- delegated children ---------------------------------------------------------------------------

TASK = "Collect supporting evidence for the briefing."


def _delegating(wire, child):
    """The parent delegates once, then answers from what came back; the child follows `child`."""

    def reply(request):
        body = json.loads(request.content)
        if wire.first_prompt(body) == TASK:
            return child(request)
        if wire.tool_results(body):
            return wire.answer("Briefing written with the delegated evidence.")
        return wire.tools(("agent_delegate", {"task": TASK}))

    return reply


def _parent(owner, wire, provider, run_limits, **agent_limits):
    agent = make_wire_agent(wire, tools=["agent.delegate", "http.fetch"], max_tool_calls=20, **agent_limits)
    run = execute(owner, agent, provider, limits=run_limits, prompt="Delegate the research, then brief me.")
    child = Run.objects.get(parent=run)
    return run, child


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_delegated_child_keeps_the_reserve_and_its_usage_counts_against_the_parent(owner, wire):
    provider = Provider(_delegating(wire, until_told(wire, FETCH)), web=news_page)
    run, child = _parent(
        owner,
        wire,
        provider,
        limits(max_steps=10, max_model_calls=10, max_tool_calls=10, synthesis_reserve_steps=2),
    )

    assert (run.status, run.answer) == ("completed", "Briefing written with the delegated evidence.")
    assert (child.kind, child.status, child.conversation_id) == (
        "delegated",
        "completed",
        run.conversation_id,
    )
    # No larger than what the parent had left outside its reserve: 10 - 1 step used - 2 reserved.
    assert (child.run_limits.max_steps, child.run_limits.max_model_calls) == (7, 9)
    assert child.run_limits.max_tool_calls == 10 - 1  # the delegate call itself was counted first
    assert child.run_limits.synthesis_reserve_steps == 2
    assert (child.synthesis_dimension, child.synthesis_step) == ("steps", 6)
    assert (child.steps, child.tool_calls) == (6, 5)
    assert (run.steps, run.model_calls, run.tool_calls) == (1 + 6 + 1, 1 + 6 + 1, 1 + 5)
    assert run.cost == ledger_total(run, child) and child.cost == ledger_total(child)
    assert len(provider.requests) == 8


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_delegated_child_that_ignores_the_reserve_fails_with_the_same_vocabulary(owner, wire):
    provider = Provider(_delegating(wire, lambda request: wire.tools(FETCH)), web=news_page)
    run, child = _parent(
        owner,
        wire,
        provider,
        limits(max_steps=10, max_model_calls=10, max_tool_calls=10, synthesis_reserve_steps=2),
    )

    assert (child.status, child.failure_reason, child.error_class, child.failure_dimension) == (
        "failed",
        "synthesis_reserve_violation",
        "SynthesisReserveViolation",
        "steps",
    )
    assert run.status == "completed"  # the parent saw the failure as a tool result and answered
    parent_results = wire.tool_results(provider.bodies[-1])
    assert parent_results == [("Error: the delegated run failed: synthesis_reserve_violation", True)]
    assert run.cost == ledger_total(run, child)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_delegated_child_without_reserves_fails_budget_exhausted_like_any_run(owner, wire):
    provider = Provider(_delegating(wire, lambda request: wire.tools(FETCH)), web=news_page)
    run, child = _parent(
        owner, wire, provider, limits(max_steps=10, max_model_calls=10, max_tool_calls=10), max_steps=4
    )

    assert (child.failure_reason, child.error_class, child.failure_dimension) == (
        "budget_exhausted",
        "BudgetExhausted",
        "steps",
    )
    assert child.run_limits.max_steps == 4
    assert run.status == "completed"
    assert (run.steps, run.model_calls) == (1 + 4 + 1, 1 + 4 + 1)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_parent_inside_its_reserve_cannot_delegate(owner, wire):
    provider = Provider(_delegating(wire, until_told(wire, FETCH)), web=news_page)
    agent = make_wire_agent(wire, tools=["agent.delegate"])
    run = execute(owner, agent, provider, limits=limits(max_steps=3, synthesis_reserve_steps=2))

    assert run.status == "completed"
    assert not Run.objects.filter(parent=run).exists()
    assert wire.tool_results(provider.bodies[1]) == [
        ("Error: not enough budget is left outside the synthesis reserve to delegate", True)
    ]
