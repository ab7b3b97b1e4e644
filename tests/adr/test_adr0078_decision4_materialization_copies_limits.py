"""docs/decisions/0001, point 4: schedule revisions opt in by pinning positive reserves in their existing
RunLimits; materialization copies the complete limits value and needs no new run kind, column, event,
route or migration."""

from __future__ import annotations

import pytest

from runs.limits import RunLimits
from runs.models import Run
from schedules import services
from schedules.schemas import parse_explicit
from tests.factories import limits, make_agent, make_schedule, run_due

pytestmark = pytest.mark.django_db


def test_the_run_gets_the_complete_pinned_value(owner, admin_user):
    schedule = make_schedule(owner, make_agent())
    pinned = limits(max_cost="4.50", synthesis_reserve_cost="0.75", synthesis_reserve_model_calls=3).to_json()
    services.pin_revision(
        schedule,
        parse_explicit({"limits": pinned, "max_consecutive_failures": 2, "reason": "opt in"}),
        by=admin_user,
        via="test",
    )
    run = run_due(schedule)
    assert run.limits == pinned
    assert set(run.limits) == set(RunLimits.model_fields)


def test_there_is_no_scheduled_run_kind():
    assert set(Run.Kind.values) == {"interactive", "delegated"}


def test_the_copy_is_field_agnostic(owner):
    """The copy is the revision's JSON value itself, so a field added to RunLimits later is
    carried without any change to materialization."""
    schedule = make_schedule(owner, make_agent())
    run = run_due(schedule)
    assert run.limits == schedule.revision.limits
