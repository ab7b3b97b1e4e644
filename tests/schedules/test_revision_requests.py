"""Revision requests (docs/contract.md#conversations): the owner asks for limits, an admin pins them as
an explicit revision that records the request, or declines with a reason. Each decision is one
transaction with its event row; decided twice at once, one decision stands. The suggestion and the replay
are checked against what the simulated provider really does under the new limits."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.db.models import Sum

from accounting.models import LedgerEntry
from runs.limits import RunLimits
from runs.models import Run
from runs.replay import Verdict
from schedules import selectors, services
from schedules.models import RevisionRequest, RevisionRequestEvent, Schedule, ScheduleRevision
from schedules.schemas import DeclineBody, parse_explicit, parse_revision_request
from schedules.selectors.requests import REPLAYED_RUNS
from tests.concurrency import race
from tests.factories import limits, make_budget_paused, make_schedule, make_user, run_due

pytestmark = pytest.mark.django_db

ASKED = limits(max_cost="2.00", synthesis_reserve_cost="1.00").to_json()


def ask(schedule: Schedule, **changes):
    body = {"limits": ASKED, "max_consecutive_failures": 2, "reason": "Runs cost USD 1.20.", **changes}
    return services.request_revision(schedule, parse_revision_request(body), by=schedule.owner, via="test")


def final(request: RevisionRequest, **changes):
    body = {
        "limits": request.limits,
        "max_consecutive_failures": request.max_consecutive_failures,
        "reason": "As asked.",
        **changes,
    }
    return parse_explicit(body)


@pytest.fixture
def paused(owner, admin_user) -> Schedule:
    return make_budget_paused(owner, admin_user)


def test_the_owner_asks_and_the_request_and_its_event_are_written(owner, agent):
    schedule = make_schedule(owner, agent)
    request = ask(schedule)
    assert (request.state, request.base_revision, request.limits, request.requested_by_id) == (
        "open",
        1,
        ASKED,
        owner.pk,
    )
    assert list(RevisionRequestEvent.objects.values_list("action", "actor_id")) == [("requested", owner.pk)]


def test_only_the_owner_may_ask(owner, other_owner, agent):
    schedule = make_schedule(owner, agent)
    with pytest.raises(PermissionDenied):
        services.request_revision(
            schedule,
            parse_revision_request({"limits": ASKED, "max_consecutive_failures": 2, "reason": "x"}),
            by=other_owner,
            via="test",
        )
    assert not RevisionRequest.objects.exists()


def test_a_second_request_while_one_is_open_is_refused_with_the_open_one(owner, agent):
    schedule = make_schedule(owner, agent)
    first = ask(schedule)
    with pytest.raises(services.RequestAlreadyOpen) as refused:
        ask(schedule, reason="Again")
    assert refused.value.request == first
    assert RevisionRequest.objects.count() == 1


def test_a_completed_schedule_takes_no_request(owner, agent):
    schedule = make_schedule(owner, agent)
    Schedule.objects.filter(pk=schedule.pk).update(status=Schedule.Status.COMPLETED)
    with pytest.raises(services.ScheduleCompleted):
        ask(schedule)


def test_pinning_a_request_writes_the_explicit_revision_that_records_it(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    request = ask(schedule)
    revision = services.pin_from_request(
        request, final(request), by=admin_user, via="admin", expected_number=1
    )
    request.refresh_from_db()
    assert (revision.number, revision.path, revision.request_id, revision.limits) == (
        2,
        "explicit",
        request.pk,
        ASKED,
    )
    assert (request.state, request.revision_id, request.decided_by_id) == (
        "pinned",
        revision.pk,
        admin_user.pk,
    )
    assert request.decided_at == revision.created_at
    assert list(RevisionRequestEvent.objects.order_by("id").values_list("action", "detail")) == [
        ("requested", ""),
        ("pinned", "revision 2"),
    ]
    schedule.refresh_from_db()
    assert schedule.current_revision == revision


def test_the_admin_may_pin_other_values_than_asked(owner, agent, admin_user):
    request = ask(make_schedule(owner, agent))
    other = limits(max_cost="3.00", synthesis_reserve_cost="1.00").to_json()
    revision = services.pin_from_request(
        request, final(request, limits=other), by=admin_user, via="admin", expected_number=None
    )
    assert revision.limits == other


def test_deciding_needs_the_pin_permission(owner, agent):
    request = ask(make_schedule(owner, agent))
    staff = make_user("sam", staff=True)
    with pytest.raises(PermissionDenied):
        services.pin_from_request(request, final(request), by=staff, via="admin", expected_number=None)
    with pytest.raises(PermissionDenied):
        services.decline_request(request, DeclineBody(reason="No."), by=staff, via="admin")
    request.refresh_from_db()
    assert request.state == "open" and not ScheduleRevision.objects.filter(request=request).exists()


def test_a_pin_reviewed_against_an_older_revision_writes_nothing(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    request = ask(schedule)
    services.pin_revision(schedule, final(request, reason="Meanwhile"), by=admin_user, via="admin")
    with pytest.raises(services.RevisionChanged):
        services.pin_from_request(request, final(request), by=admin_user, via="admin", expected_number=1)
    request.refresh_from_db()
    assert request.state == "open"
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 2
    assert RevisionRequestEvent.objects.filter(action="pinned").count() == 0


def test_declining_keeps_the_limits_and_records_why(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    request = ask(schedule)
    declined = services.decline_request(
        request, DeclineBody(reason="Fix the prompt first."), by=admin_user, via="admin"
    )
    assert (declined.state, declined.decline_reason, declined.decided_by_id) == (
        "declined",
        "Fix the prompt first.",
        admin_user.pk,
    )
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1
    assert RevisionRequestEvent.objects.filter(action="declined").count() == 1
    ask(schedule, reason="A second try")  # a decided request no longer blocks a new one


def test_a_decided_request_cannot_be_decided_again(owner, agent, admin_user):
    request = ask(make_schedule(owner, agent))
    services.decline_request(request, DeclineBody(reason="No."), by=admin_user, via="admin")
    with pytest.raises(services.RequestDecided):
        services.pin_from_request(request, final(request), by=admin_user, via="admin", expected_number=None)
    with pytest.raises(services.RequestDecided):
        services.decline_request(request, DeclineBody(reason="No again."), by=admin_user, via="admin")
    assert RevisionRequestEvent.objects.exclude(action="requested").count() == 1


@pytest.mark.django_db(transaction=True)
def test_decided_twice_at_once_one_decision_stands_and_the_other_is_told(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    request = ask(schedule)
    other_admin = make_user("grace", staff=True, pin=True)
    results = race(
        [
            lambda: services.pin_from_request(
                request, final(request), by=admin_user, via="admin", expected_number=1
            ),
            lambda: services.decline_request(request, DeclineBody(reason="No."), by=other_admin, via="admin"),
        ]
    )
    decided = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(decided) == 1 and len(refused) == 1
    assert isinstance(refused[0], services.RequestDecided)
    request.refresh_from_db()
    assert request.state in ("pinned", "declined")
    assert RevisionRequestEvent.objects.exclude(action="requested").count() == 1
    pinned = ScheduleRevision.objects.filter(schedule=schedule, request=request).count()
    assert pinned == (1 if request.state == "pinned" else 0)


@pytest.mark.django_db(transaction=True)
def test_two_requests_at_once_make_one(owner, agent):
    schedule = make_schedule(owner, agent)
    results = race([lambda: ask(schedule), lambda: ask(schedule)])
    assert sum(isinstance(r, services.RequestAlreadyOpen) for r in results) == 1
    assert RevisionRequest.objects.filter(schedule=schedule).count() == 1


# -- the suggestion, the replay and what really happens ------------------------------------------


def test_the_suggestion_is_the_dearest_run_plus_half_and_the_reserve_on_top_rounded_up_to_dollars(paused):
    runs = selectors.recorded_runs(paused)
    # Each ran out at its USD 1.00: a USD 0.60 call, then one cut at what the dollars left paid for.
    assert [(r.status, len(r.steps)) for r in runs] == [("failed", 2)] * 2
    assert all(Decimal("0.99") < r.cost <= Decimal("1.00") for r in runs)
    assert [s.tool_calls for s in runs[0].steps] == [1, 0]  # the cut call asked for no tool
    suggestion = selectors.suggested_limits(paused.revision, runs)
    assert suggestion.limits.max_cost == Decimal("3")  # 1.00 x 1.5 = 1.50, + the 1.00 reserve, up to 3
    assert suggestion.limits.synthesis_reserve_cost == Decimal("1.00")
    assert (suggestion.limits.max_steps, suggestion.limits.synthesis_reserve_steps) == (10, 2)
    assert suggestion.max_consecutive_failures == 2
    assert re.search(r"the most expensive cost USD 0\.99\d*, so USD 3\.00 per run", suggestion.basis)
    # Under the suggestion, the recorded runs never reach the reserve where their record ends.
    report = selectors.replay_report(runs, suggestion.limits)
    assert {r.replay.verdict for r in report.rows} == {Verdict.CONTINUES}
    assert "none would run out" in report.summary


def test_the_suggestion_never_lowers_a_limit(owner, agent):
    schedule = make_schedule(owner, agent)
    suggestion = selectors.suggested_limits(schedule.revision, [])
    assert suggestion.limits == schedule.revision.run_limits


def test_the_replay_under_its_own_limits_says_what_really_happened(paused):
    report = selectors.replay_report(selectors.recorded_runs(paused), paused.revision.run_limits)
    assert [(r.replay.verdict, r.replay.step, r.replay.dimension) for r in report.rows] == [
        (Verdict.EXHAUSTED, 3, "cost")
    ] * 2
    runs = Run.objects.filter(conversation__metadata__schedule_id=paused.pk)
    assert {(r.failure_reason, r.failure_dimension, r.steps) for r in runs} == {
        ("budget_exhausted", "cost", 2)
    }


def test_what_the_replay_predicts_for_the_new_limits_is_what_the_next_run_does(paused, admin_user):
    proposed = RunLimits.model_validate(ASKED)  # USD 2.00 with a USD 1.00 reserve
    report = selectors.replay_report(selectors.recorded_runs(paused), proposed)
    predicted = {(r.replay.verdict, r.replay.step, r.replay.dimension) for r in report.rows}
    assert predicted == {(Verdict.SYNTHESIS, 3, "cost")}
    assert "Told to write its answer at step 3: the cost reserve is reached." in report.rows[0].words

    request = ask(paused, limits=proposed.to_json())
    services.pin_from_request(request, final(request), by=admin_user, via="admin", expected_number=2)
    # Resumed after the last slot that ran (the factory ran the next two slots, ahead of now).
    last = paused.occurrences.order_by("-scheduled_for").first()
    services.resume_schedule(paused, by=paused.owner, now=last.scheduled_for + timedelta(minutes=1))
    run = run_due(paused)
    assert run is not None
    assert run.run_limits == proposed  # the next run copied the pinned limits
    assert (run.status, run.synthesis_dimension, run.synthesis_step) == ("completed", "cost", 3)
    paused.refresh_from_db()
    assert paused.consecutive_failures == 0


def test_a_run_whose_conversation_was_deleted_is_replayed_from_the_ledger(paused):
    from runs.services import delete_conversation

    run = Run.objects.filter(conversation__metadata__schedule_id=paused.pk).order_by("id").first()
    delete_conversation(run.conversation)
    runs = selectors.recorded_runs(paused)
    gone = next(r for r in runs if r.run_id == run.pk)
    spent = LedgerEntry.objects.filter(run_id=run.pk).aggregate(total=Sum("cost"))["total"]
    assert (gone.run_exists, gone.estimated, gone.cost, len(gone.steps)) == (False, True, spent, 2)
    assert sum(s.tool_calls for s in gone.steps) == 1  # spread from the accounted total


def test_the_panel_says_resume_will_not_help_with_the_figures(paused):
    panel = selectors.status_panel(paused, "UTC")
    assert panel.advice is not None and panel.advice.helps is False and panel.advice.action == "request"
    assert re.fullmatch(
        r"Resuming will not help: the last 2 runs cost USD 0\.99\d* and USD 0\.99\d* and ran out of the "
        r"limit of USD 1\.00 per run, so the next run will likely stop the same way\.",
        panel.advice.sentence,
    )
    assert [g.failure.headline for g in panel.failures] == [
        "The run used its whole USD 1.00 budget before answering."
    ]


def test_once_the_budget_is_raised_the_panel_says_resuming_runs_with_it(paused, admin_user):
    request = ask(paused)
    services.pin_from_request(request, final(request), by=admin_user, via="admin", expected_number=2)
    paused.refresh_from_db()
    panel = selectors.status_panel(paused, "UTC")
    assert panel.advice is not None and panel.advice.helps is True
    assert panel.advice.sentence.startswith(
        "The limits were raised since: revision 3 allows USD 2.00 per run"
    )
    # The failures still read with the limit they hit then (revision 2's USD 1.00).
    assert "its whole USD 1.00 budget" in panel.failures[0].failure.headline


def test_an_open_request_is_shown_instead_of_asking_again(paused):
    request = ask(paused)
    panel = selectors.status_panel(paused, "UTC")
    assert panel.advice is not None and panel.advice.waiting == request


def test_a_permanent_provider_error_says_what_must_change_first(owner, admin_user):
    from tests.factories import make_agent

    agent = make_agent("sim-quota", model="sim-quota")
    schedule = make_schedule(owner, agent)
    run_due(schedule)
    run_due(schedule)
    schedule.refresh_from_db()
    panel = selectors.status_panel(schedule, "UTC")
    assert panel.advice is not None and panel.advice.helps is False and panel.advice.action == ""
    assert panel.advice.sentence == (
        "Resuming will not help until the provider account is topped up or its spend limit raised."
    )


def test_only_the_last_twenty_runs_are_replayed_newest_first(owner, agent):
    schedule = make_schedule(owner, agent)
    ran = [run_due(schedule) for _ in range(REPLAYED_RUNS + 5)]
    assert all(run is not None and run.status == "completed" for run in ran)

    recorded = selectors.recorded_runs(schedule)

    newest = [run.pk for run in reversed(ran)][:REPLAYED_RUNS]
    assert REPLAYED_RUNS == 20
    assert [r.run_id for r in recorded] == newest
    report = selectors.replay_report(recorded, schedule.revision.run_limits)
    assert len(report.rows) == 20 and report.summary.startswith("Of the last 20 runs:")
