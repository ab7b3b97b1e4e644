"""docs/decisions/0002, point 2: cost = min(agent's finite cost or USD 5, the schedule cost ceiling),
with reserves of 2 steps, 2 model calls and USD 1, each kept only when strictly below its total, so a
research run that approaches its budget writes its answer instead of failing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounting import ledger
from accounting.models import Reservation
from schedules import services
from schedules.models import Occurrence
from schedules.schemas import parse_explicit
from tests.factories import make_agent, make_schedule, run_due

pytestmark = pytest.mark.django_db


def test_the_2026_09_01_failure_a_usd_1_budget_without_reserve_is_exhausted_before_synthesis(
    owner, admin_user
):
    briefing = make_schedule(owner, make_agent(model="sim-expensive"))  # about USD 0.60 a call
    legacy = {
        **briefing.revision.limits,
        "max_cost": "1.00",
        "synthesis_reserve_cost": "0",
        "synthesis_reserve_steps": 0,
        "synthesis_reserve_model_calls": 0,
    }
    services.pin_revision(
        briefing,
        parse_explicit({"limits": legacy, "max_consecutive_failures": 2, "reason": "the old definition"}),
        by=admin_user,
        via="test",
    )
    run = run_due(briefing)
    assert (run.status, run.failure_reason, run.failure_dimension) == ("failed", "budget_exhausted", "cost")
    assert run.answer == ""


def test_the_repaired_definition_usd_5_with_a_usd_1_reserve_writes_the_answer(owner):
    briefing = make_schedule(owner, make_agent(model="sim-expensive"))
    assert briefing.revision.limits["max_cost"] == "5.00"
    assert briefing.revision.limits["synthesis_reserve_cost"] == "1.00"
    run = run_due(briefing)
    assert run.status == "completed"
    assert run.answer.startswith("Briefing")
    assert Decimal("0.59") <= run.cost / run.model_calls <= Decimal("0.61")


def test_a_run_that_reaches_its_step_reserve_answers_instead_of_failing(owner):
    briefing = make_schedule(owner, make_agent(model="sim-tool-loop", max_steps=6, max_tool_calls=20))
    run = run_due(briefing)
    assert run.status == "completed"
    assert (run.synthesis_dimension, run.synthesis_step) == ("steps", 5)
    assert run.steps == 5


def test_a_low_ceiling_still_yields_a_valid_definition_with_the_cost_reserve_omitted(owner):
    budget = ledger.budget_for(owner.pk)
    budget.schedule_cost_ceiling = Decimal("0.80")
    budget.save()
    limits = make_schedule(owner, make_agent()).revision.run_limits
    assert (limits.max_cost, limits.synthesis_reserve_cost) == (Decimal("0.80"), Decimal("0"))
    assert limits.synthesis_reserve_steps == 2


def test_the_default_ceilings_admit_both_briefings_in_flight_at_once(owner):
    first = make_schedule(owner, make_agent(model="sim-research"), title="Technology briefing")
    second = make_schedule(owner, make_agent(model="sim-research"), title="Markets briefing")
    for schedule in (first, second):
        occurrence = Occurrence.objects.create(
            schedule=schedule, scheduled_for=schedule.next_occurrence_at, revision=schedule.revision
        )
        ledger.reserve(owner.pk, run_id=10_000 + occurrence.pk, amount=schedule.revision.run_limits.max_cost)
    assert Reservation.objects.filter(released_at__isnull=True).count() == 2
    assert ledger.summarize(owner.pk).open_total == Decimal("10.00")
