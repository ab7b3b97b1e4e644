from __future__ import annotations

from decimal import Decimal

import pytest

from runs.limits import (
    InvalidLimits,
    RunLimits,
    budget_state,
    tool_calls_that_fit,
    validate_limits,
    with_reserves,
)
from tests.factories import limits

VALID = limits(
    synthesis_reserve_steps=2, synthesis_reserve_model_calls=2, synthesis_reserve_cost="1.00"
).to_json()


def test_limits_round_trip_through_json_with_money_as_strings():
    data = validate_limits(VALID).to_json()
    assert data["max_cost"] == "5.00"
    assert data["synthesis_reserve_cost"] == "1.00"
    assert RunLimits.from_json(data) == validate_limits(VALID)
    assert isinstance(RunLimits.from_json(data).max_cost, Decimal)


def test_a_stored_sub_cent_amount_keeps_its_places_but_a_person_types_cents():
    stored = {**VALID, "max_cost": "0.123456", "synthesis_reserve_cost": "0"}
    assert RunLimits.from_json(stored).to_json()["max_cost"] == "0.123456"
    with pytest.raises(InvalidLimits) as caught:
        validate_limits(stored)
    assert caught.value.fields["max_cost"] == "max_cost must have at most 2 decimal places"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"max_steps": 0}, "max_steps", "max_steps must be at least 1"),
        ({"max_model_calls": 0}, "max_model_calls", "max_model_calls must be at least 1"),
        ({"max_tool_calls": -1}, "max_tool_calls", "max_tool_calls must be at least 0"),
        ({"max_cost": "0"}, "max_cost", "max_cost must be above 0"),
        ({"max_cost": "-1"}, "max_cost", "max_cost must be written without a sign"),
        ({"max_cost": "Infinity"}, "max_cost", 'max_cost must be an amount such as "5.00"'),
        ({"max_cost": "NaN"}, "max_cost", 'max_cost must be an amount such as "5.00"'),
        ({"max_cost": 1e309}, "max_cost", "not a floating-point number"),
        ({"max_cost": 0.5}, "max_cost", "not a floating-point number"),
        ({"max_cost": "five"}, "max_cost", 'max_cost must be an amount such as "5.00"'),
        ({"max_cost": "0.001"}, "max_cost", "max_cost must have at most 2 decimal places"),
        ({"max_cost": "5_0"}, "max_cost", "max_cost must be written without separators"),
        ({"max_cost": "5E+0"}, "max_cost", "max_cost must be written without an exponent"),
        ({"max_cost": "\u0665.\u0660\u0660"}, "max_cost", "max_cost must be written with the digits 0-9"),
        ({"max_cost": "\uff15.00"}, "max_cost", "max_cost must be written with the digits 0-9"),
        ({"max_cost": "100000.00"}, "max_cost", "max_cost must be below 100,000 USD"),
        ({"max_cost": "5."}, "max_cost", 'max_cost must be an amount such as "5.00"'),
        ({"max_steps": "10"}, "max_steps", "max_steps must be a whole number"),
        ({"max_steps": True}, "max_steps", "max_steps must be a whole number"),
        (
            {"synthesis_reserve_steps": -1},
            "synthesis_reserve_steps",
            "synthesis_reserve_steps must be at least 0",
        ),
        (
            {"synthesis_reserve_steps": 10},
            "synthesis_reserve_steps",
            "synthesis_reserve_steps must be below max_steps (10 ≥ 10)",
        ),
        (
            {"synthesis_reserve_model_calls": 11},
            "synthesis_reserve_model_calls",
            "synthesis_reserve_model_calls must be below max_model_calls (11 ≥ 10)",
        ),
        (
            {"synthesis_reserve_tool_calls": 6},
            "synthesis_reserve_tool_calls",
            "synthesis_reserve_tool_calls must be below max_tool_calls (6 ≥ 6)",
        ),
        (
            {"max_cost": "0.80", "synthesis_reserve_cost": "1.00"},
            "synthesis_reserve_cost",
            "synthesis_reserve_cost must be below max_cost (1.00 ≥ 0.80)",
        ),
        (
            {"synthesis_reserve_cost": "-0.01"},
            "synthesis_reserve_cost",
            "synthesis_reserve_cost must be written without a sign",
        ),
        ({"surprise": 1}, "surprise", "surprise is not a recognised field"),
    ],
)
def test_invalid_limits_are_refused_with_a_message_naming_the_field(change, field, message):
    with pytest.raises(InvalidLimits) as caught:
        validate_limits({**VALID, **change})
    assert field in caught.value.fields
    assert message in caught.value.fields[field]


def test_a_missing_field_is_named():
    data = dict(VALID)
    del data["synthesis_reserve_cost"]
    with pytest.raises(InvalidLimits) as caught:
        validate_limits(data)
    assert caught.value.fields == {"synthesis_reserve_cost": "synthesis_reserve_cost is required"}


def test_all_zero_reserves_are_valid_and_never_activate_before_the_tool_budget_runs_out():
    plain = limits()
    assert not plain.has_reserves
    state = budget_state(plain, {"steps": 9, "model_calls": 9, "tool_calls": 5, "cost": Decimal("4.99")})
    assert state.exhausted is None
    assert state.synthesis is None


def test_with_reserves_keeps_each_only_when_strictly_below_its_total():
    pinned = with_reserves(
        limits(max_steps=2, max_cost="1.00"), steps=2, model_calls=2, tool_calls=0, cost=Decimal("1")
    )
    assert pinned.synthesis_reserve_steps == 0
    assert pinned.synthesis_reserve_model_calls == 2
    assert pinned.synthesis_reserve_cost == 0


@pytest.mark.parametrize(
    ("usage", "exhausted", "synthesis"),
    [
        ({"steps": 7, "model_calls": 7, "tool_calls": 0, "cost": Decimal("1")}, None, None),
        ({"steps": 8, "model_calls": 8, "tool_calls": 0, "cost": Decimal("1")}, None, "steps"),
        ({"steps": 1, "model_calls": 1, "tool_calls": 0, "cost": Decimal("4.00")}, None, "cost"),
        ({"steps": 1, "model_calls": 1, "tool_calls": 6, "cost": Decimal("1")}, None, "tool_calls"),
        ({"steps": 10, "model_calls": 10, "tool_calls": 0, "cost": Decimal("1")}, "steps", "steps"),
        ({"steps": 3, "model_calls": 3, "tool_calls": 0, "cost": Decimal("5.01")}, "cost", "cost"),
    ],
)
def test_budget_state_names_the_first_dimension(usage, exhausted, synthesis):
    reserved = limits(
        synthesis_reserve_steps=2, synthesis_reserve_model_calls=2, synthesis_reserve_cost="1.00"
    )
    state = budget_state(reserved, usage)
    assert (state.exhausted, state.synthesis) == (exhausted, synthesis)


def test_tool_calls_inside_the_tool_reserve_never_fit():
    reserved = limits(max_tool_calls=5, synthesis_reserve_tool_calls=2)
    assert tool_calls_that_fit(reserved, 0) == 3
    assert tool_calls_that_fit(reserved, 3) == 0
    assert tool_calls_that_fit(limits(max_tool_calls=5), 4) == 1


def test_an_exhausted_tool_budget_is_named_before_an_active_cost_reserve():
    reserved = limits(synthesis_reserve_cost="1.00")
    state = budget_state(reserved, {"steps": 2, "model_calls": 2, "tool_calls": 6, "cost": Decimal("4.50")})
    assert state.synthesis == "tool_calls"
