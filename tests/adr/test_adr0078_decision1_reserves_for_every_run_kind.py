"""docs/decisions/0001, point 1: positive reserves are an execution contract for every run kind; the
limits are persisted on every run whatever its kind, and all-zero reserves preserve the old behaviour."""

from __future__ import annotations

import pytest

from runs.models import Run
from runs.runtime import execute_run
from runs.services import claim_run
from tests.factories import limits, make_agent, make_schedule, run_due, start_interactive_run

pytestmark = pytest.mark.django_db

RESERVED = limits(max_steps=6, max_tool_calls=20, synthesis_reserve_steps=2)


def _interactive(owner, model, run_limits):
    run = start_interactive_run(owner.pk, make_agent(model=model), "Research this.", limits=run_limits)
    claim_run(run)
    return execute_run(run, sleep=lambda s: None)


def test_an_interactive_run_honours_its_reserve(owner):
    run = _interactive(owner, "sim-tool-loop", RESERVED)
    assert run.status == "completed"
    assert (run.synthesis_dimension, run.synthesis_step) == ("steps", 5)
    assert run.limits == RESERVED.to_json()


def test_a_scheduled_run_is_an_ordinary_run_that_honours_its_reserve(owner):
    schedule = make_schedule(owner, make_agent(model="sim-tool-loop", max_steps=6, max_tool_calls=20))
    run = run_due(schedule)
    assert run.kind == Run.Kind.INTERACTIVE
    assert run.conversation.metadata["schedule_id"] == schedule.pk
    assert run.synthesis_dimension == "steps"
    assert run.status == "completed"


def test_a_delegated_child_honours_its_reserve(owner):
    parent_limits = limits(max_steps=12, max_model_calls=12, max_tool_calls=20, synthesis_reserve_steps=2)
    agent = make_agent(
        model="sim-tool-loop", tools=["agent.delegate", "clock.now"], max_steps=6, max_tool_calls=20
    )
    run = start_interactive_run(owner.pk, agent, "Delegate a search.", limits=parent_limits)
    claim_run(run)
    execute_run(run, sleep=lambda s: None)
    child = Run.objects.filter(parent=run).order_by("id").first()
    assert child is not None and child.kind == Run.Kind.DELEGATED
    assert child.run_limits.synthesis_reserve_steps == 2
    assert child.synthesis_dimension == "steps"
    assert child.status == "completed"


def test_all_zero_reserves_behave_as_before_and_fail_at_the_hard_limit(owner):
    run = _interactive(owner, "sim-tool-loop", limits(max_steps=20, max_model_calls=4, max_tool_calls=20))
    assert (run.status, run.failure_reason, run.failure_dimension) == (
        "failed",
        "budget_exhausted",
        "model_calls",
    )
    assert run.synthesis_dimension == ""
    assert run.model_calls == 4
