"""What other limits would have done to a recorded run: the loop's own budget rules, replayed over
each step's recorded usage (runs.replay). The runs against the simulated provider that check the
estimate against what really happens are in tests/schedules/test_revision_requests.py."""

from __future__ import annotations

from decimal import Decimal

from runs.replay import Ending, Step, Verdict, replay
from tests.factories import limits

D = Decimal
# sim-expensive as recorded under USD 1.00: a research step asking for a tool at USD 0.60 a call,
# then one cut at what the dollars left paid for (USD 0.3983), each call bounded before it was made.
CUT_OFF = [Step(D("0.60"), 1), Step(D("0.3983"), 0)]
ANSWERED = [Step(D("0.60"), 1), Step(D("0.60"), 1), Step(D("0.60"), 0)]


def test_under_its_own_limits_a_cut_off_run_runs_out_where_it_did():
    result = replay(limits(max_cost="1.00"), CUT_OFF, ending=Ending.LIMITS)
    assert (result.verdict, result.step, result.dimension) == (Verdict.EXHAUSTED, 3, "cost")
    assert result.cost == D("0.9983") <= D("1.00")  # the dollars left cannot pay for its next call


def test_a_bigger_budget_with_a_reserve_tells_it_to_answer_on_the_next_step():
    result = replay(limits(max_cost="2.00", synthesis_reserve_cost="1.00"), CUT_OFF, ending=Ending.LIMITS)
    assert (result.verdict, result.step, result.dimension) == (Verdict.SYNTHESIS, 3, "cost")


def test_a_bigger_budget_without_a_reserve_goes_on_past_the_record():
    result = replay(limits(max_cost="3.00"), CUT_OFF, ending=Ending.LIMITS)
    assert (result.verdict, result.step) == (Verdict.CONTINUES, 3)


def test_an_answered_run_that_fits_fits():
    result = replay(limits(max_cost="5.00"), ANSWERED, ending=Ending.ANSWERED)
    assert (result.verdict, result.step, result.cost) == (Verdict.FITS, 3, D("1.80"))


def test_a_reserve_reached_inside_the_record_is_the_synthesis_step():
    result = replay(limits(max_cost="2.00", synthesis_reserve_cost="1.00"), ANSWERED, ending=Ending.ANSWERED)
    # Outside the reserve: USD 1.00 before step 1 pays its 0.60; 0.40 before step 2 does not.
    assert (result.verdict, result.step, result.dimension) == (Verdict.SYNTHESIS, 2, "cost")


def test_a_turn_the_dollars_outside_the_reserve_cannot_pay_for_is_the_synthesis_step():
    # USD 1.50 with 1.00 held for the answer: the first 0.60 step does not fit in the 0.50 outside.
    result = replay(limits(max_cost="1.50", synthesis_reserve_cost="1.00"), ANSWERED, ending=Ending.ANSWERED)
    assert (result.verdict, result.step, result.dimension) == (Verdict.SYNTHESIS, 1, "cost")


def test_a_step_the_dollars_left_cannot_pay_for_ends_the_run_without_a_reserve():
    result = replay(limits(max_cost="1.00"), ANSWERED, ending=Ending.ANSWERED)
    assert (result.verdict, result.step, result.dimension) == (Verdict.EXHAUSTED, 2, "cost")


def test_a_step_limit_runs_out_before_the_answer():
    result = replay(limits(max_steps=2, max_model_calls=10), ANSWERED, ending=Ending.ANSWERED)
    assert (result.verdict, result.step, result.dimension) == (Verdict.EXHAUSTED, 3, "steps")


def test_used_up_tool_calls_owe_a_synthesis_turn_never_a_failure():
    result = replay(limits(max_tool_calls=1), ANSWERED, ending=Ending.ANSWERED)
    assert (result.verdict, result.step, result.dimension) == (Verdict.SYNTHESIS, 2, "tool_calls")


def test_tool_calls_beyond_what_fits_do_not_count_and_owe_synthesis():
    steps = [Step(D("0.01"), 5), Step(D("0.01"), 0)]
    result = replay(limits(max_tool_calls=2), steps, ending=Ending.ANSWERED)
    assert (result.verdict, result.step, result.dimension) == (Verdict.SYNTHESIS, 2, "tool_calls")
    assert result.usage["tool_calls"] == 2


def test_a_failure_that_is_not_a_limit_is_unchanged_by_limits():
    result = replay(limits(max_cost="9.00"), CUT_OFF, ending=Ending.OTHER)
    assert result.verdict == Verdict.UNCHANGED


def test_a_run_without_any_answered_call_makes_no_difference():
    assert replay(limits(), [], ending=Ending.OTHER).verdict == Verdict.NO_USAGE
