"""A monthly cap per schedule (docs/contract.md#monthly-cap-per-schedule): pinned like a limit, an
occurrence that would cross it is skipped `monthly_cap` (not a failure, the schedule stays active),
the owner is told once a month; and the forecast of what each schedule and the month will cost."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from runs.models import Run
from schedules import forecast, services
from schedules.execution import materialize_due
from schedules.models import Notice, Occurrence, Schedule
from schedules.schemas import InvalidSchedule, parse_explicit, parse_update
from tests.factories import finish, limits, make_schedule, materialize, spend

pytestmark = pytest.mark.django_db

# Policy limits of the test agent: max_cost USD 5 (tests.factories).
DEC_10 = datetime(2026, 12, 10, 6, 0, tzinfo=UTC)  # 08:00 in Europe/Riga


def capped(schedule: Schedule, by, cap: str | None, *, max_cost: str = "5.00") -> None:
    body = {
        "limits": limits(max_cost=max_cost, synthesis_reserve_cost="1.00").to_json(),
        "max_consecutive_failures": 2,
        "reason": "Keep this briefing under its monthly allowance.",
        "monthly_cap": cap,
    }
    services.pin_revision(schedule, parse_explicit(body), by=by, via="admin")
    schedule.refresh_from_db()


def tick(at: datetime) -> list[int]:
    enqueued: list[int] = []
    materialize_due(enqueue=enqueued.extend, now=at)
    return enqueued


def test_a_cap_below_the_cost_of_one_run_is_refused_with_the_reason(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    with pytest.raises(InvalidSchedule) as refused:
        capped(schedule, admin_user, "4.99")
    assert "below the cost limit of one run (USD 5.00)" in refused.value.fields["monthly_cap"]
    assert schedule.revisions.count() == 1


def test_the_cap_is_pinned_on_the_revision_and_kept_by_schedule_update(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    assert schedule.revision.monthly_cap is None  # the create policy pins none
    capped(schedule, admin_user, "40.00")
    services.update_schedule(schedule, parse_update({"title": "Renamed"}), by=owner, via="test")
    schedule.refresh_from_db()
    assert schedule.revision.number == 3
    assert schedule.revision.monthly_cap == Decimal("40.00")
    with pytest.raises(InvalidSchedule):
        parse_update({"monthly_cap": "10.00"})


def test_an_explicit_revision_without_the_cap_keeps_it_and_null_removes_it(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    capped(schedule, admin_user, "40.00")
    body = {"limits": schedule.revision.limits, "max_consecutive_failures": 3, "reason": "More failures."}
    services.pin_revision(schedule, parse_explicit(body), by=admin_user, via="admin")
    schedule.refresh_from_db()
    assert schedule.revision.monthly_cap == Decimal("40.00")
    capped(schedule, admin_user, None)
    assert schedule.revision.monthly_cap is None


def test_an_occurrence_that_would_cross_the_cap_is_skipped_not_failed(owner, agent, admin_user):
    with time_machine.travel(DEC_10 - timedelta(days=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        capped(schedule, admin_user, "12.00")
    spend(owner.pk, "7.50", schedule_id=schedule.pk, at=DEC_10 - timedelta(days=2))

    with time_machine.travel(DEC_10 + timedelta(seconds=5), tick=False):
        enqueued = tick(DEC_10 + timedelta(seconds=5))

    assert enqueued == []  # 7.50 + 5.00 > 12.00
    occurrence = Occurrence.objects.get(schedule=schedule)
    assert occurrence.outcome == Occurrence.Outcome.SKIPPED
    assert occurrence.skip_reason == Occurrence.SkipReason.MONTHLY_CAP
    assert occurrence.run is None
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.ACTIVE
    assert schedule.consecutive_failures == 0
    assert schedule.next_occurrence_at == DEC_10 + timedelta(days=1)


def test_a_run_that_fits_exactly_under_the_cap_runs(owner, agent, admin_user):
    with time_machine.travel(DEC_10 - timedelta(days=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        capped(schedule, admin_user, "12.50")
    spend(owner.pk, "7.50", schedule_id=schedule.pk, at=DEC_10 - timedelta(days=2))
    with time_machine.travel(DEC_10 + timedelta(seconds=5), tick=False):
        assert len(tick(DEC_10 + timedelta(seconds=5))) == 1  # 7.50 + 5.00 = 12.50: not above


def test_the_owner_is_told_once_a_month_and_a_new_month_runs_again(owner, agent, admin_user):
    with time_machine.travel(DEC_10 - timedelta(days=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        capped(schedule, admin_user, "6.00")
    spend(owner.pk, "2.00", schedule_id=schedule.pk, at=DEC_10 - timedelta(days=2))
    for day in range(3):
        at = DEC_10 + timedelta(days=day, seconds=5)
        with time_machine.travel(at, tick=False):
            tick(at)
    skipped = Occurrence.objects.filter(schedule=schedule, skip_reason="monthly_cap")
    assert skipped.count() == 3
    assert Notice.objects.filter(kind=Notice.Kind.MONTHLY_CAP, schedule=schedule).count() == 1

    january = datetime(2027, 1, 1, 6, 0, 5, tzinfo=UTC)
    schedule.refresh_from_db()
    Schedule.objects.filter(pk=schedule.pk).update(next_occurrence_at=january - timedelta(seconds=5))
    with time_machine.travel(january, tick=False):
        assert len(tick(january)) == 1  # December's spend does not count in January


def test_an_overlap_skip_says_so(owner, agent):
    with time_machine.travel(DEC_10 - timedelta(days=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
    materialize(schedule, scheduled_for=DEC_10 - timedelta(days=1))  # still running
    with time_machine.travel(DEC_10 + timedelta(seconds=5), tick=False):
        tick(DEC_10 + timedelta(seconds=5))
    skipped = Occurrence.objects.get(schedule=schedule, scheduled_for=DEC_10)
    assert (skipped.outcome, skipped.skip_reason) == ("skipped", "overlap")


# -- forecast ------------------------------------------------------------------------------------


def test_a_schedule_forecast_uses_the_median_of_its_recent_runs_and_stops_at_its_cap(
    owner, agent, admin_user
):
    with time_machine.travel(DEC_10 - timedelta(days=5), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
    for day, cost in zip(range(5, 2, -1), ["0.40", "0.60", "3.00"], strict=True):
        occurrence = materialize(schedule, scheduled_for=DEC_10 - timedelta(days=day))
        Run.objects.filter(pk=occurrence.run_id).update(cost=Decimal(cost))  # as its steps charged it
        with time_machine.travel(DEC_10 - timedelta(days=day, hours=-1), tick=False):
            finish(occurrence)
        spend(owner.pk, cost, schedule_id=schedule.pk, at=DEC_10 - timedelta(days=day))
    schedule.refresh_from_db()

    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        found = forecast.schedule_forecast(schedule)

    # 10 to 31 December at 08:00: 22 fires left; median of 0.40, 0.60, 3.00 is 0.60.
    assert found.remaining_fires == 22
    assert found.spent == Decimal("4.00")
    assert found.expected == Decimal("4.00") + 22 * Decimal("0.60")
    assert found.worst == Decimal("4.00") + 22 * Decimal("5.00")

    capped(schedule, admin_user, "20.00")
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        found = forecast.schedule_forecast(schedule)
    # The tick skips a run when spend + its USD 5 limit would pass the cap: at 0.60 a run, 19 runs
    # take the USD 4.00 spent to 15.40, and the 20th would not fit; in the worst case 3 runs of
    # USD 5 take it to 19.00.
    assert (found.expected, found.worst) == (Decimal("15.40"), Decimal("19.00"))
    assert found.runs == forecast.Runs(due=22, run=19, refused=0, skipped=3)
    assert found.worst_runs == forecast.Runs(due=22, run=3, refused=0, skipped=19)


def test_a_paused_schedule_forecasts_no_more_fires(owner, agent):
    with time_machine.travel(DEC_10, tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        services.pause_schedule(schedule, by=owner)
        schedule.refresh_from_db()
        found = forecast.schedule_forecast(schedule)
    assert found.remaining_fires == 0 and found.expected == found.worst == 0


def test_the_month_says_when_the_ceiling_is_reached_at_this_pace(owner, agent):
    # Ceiling USD 250; USD 200 spent; one USD 5 run a day from 10 Dec (no history: max_cost each).
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        make_schedule(owner, agent, cron="0 8 * * *")
        spend(owner.pk, "200.00", at=DEC_10 - timedelta(days=3))
        month = forecast.month_forecast(owner.pk)
    assert month.spent == Decimal("200.00")
    # The tenth run takes it to 250 on Dec 19; admission refuses the twelve after it.
    assert month.expected == month.worst == Decimal("250.00")
    assert month.ceiling_reached_on == date(2026, 12, 19)
    assert month.runs == forecast.Runs(due=22, run=10, refused=12, skipped=0)


def test_a_schedule_firing_every_minute_is_forecast_without_walking_each_slot(owner, agent):
    with time_machine.travel(DEC_10, tick=False):
        schedule = make_schedule(owner, agent, cron="* * * * *")
        found = forecast.schedule_forecast(schedule)
    # The rest of 10 Dec in Riga (08:01 to 23:59) then 21 whole days.
    assert found.remaining_fires == 16 * 60 - 1 + 21 * 1440
