"""The month's forecast as every surface reads it (from the owner's forecast groups, the members of
a group a ceiling cuts into named by their position) equals the plain fire-by-fire simulation of
tests/schedules/test_forecast_simulation.py run on the owner's schedules as they are: for the month,
for each schedule's page, for the schedules named as stopped and for the budget page's table."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from accounting import ledger
from accounting.models import OwnerBudget
from accounting.selectors import cost_this_month
from runs.models import Run
from schedules import forecast, services
from schedules.forecast import table
from schedules.forecast.cadence import Cadence
from schedules.models import Schedule
from schedules.schemas import parse_explicit
from tests.factories import finish, limits, make_schedule, materialize, spend
from tests.schedules.test_forecast_simulation import Planned, plain_simulation

pytestmark = pytest.mark.django_db

DEC_10 = datetime(2026, 12, 10, 6, 0, tzinfo=UTC)  # 08:00 in Riga


def plain_month(owner_id: int, *, worst: bool = False):  # type: ignore[no-untyped-def]
    """The plain simulation of the owner's active schedules, read from the schedules themselves."""
    summary = ledger.summarize(owner_id)
    zone = zoneinfo.ZoneInfo(summary.timezone)
    active = list(
        Schedule.objects.filter(owner_id=owner_id, status="active").select_related("current_revision")
    )
    medians = table.per_fire_costs(s.pk for s in active)
    spent = cost_this_month(owner_id, [s.pk for s in active], summary.timezone)
    planned = []
    for schedule in active:
        revision = schedule.revision
        max_cost = revision.run_limits.max_cost
        median = medians.get(schedule.pk)
        planned.append(
            Planned(
                schedule.pk,
                Cadence(schedule.kind, revision.cron, revision.timezone, revision.run_at),
                max_cost,
                max_cost if median is None else min(median, max_cost),
                revision.monthly_cap,
                spent.get(schedule.pk, Decimal(0)),
            )
        )
    plain = plain_simulation(
        planned,
        now=datetime.now(UTC),
        zone=zone,
        daily=summary.daily_ceiling,
        monthly=summary.monthly_ceiling,
        spent_today=summary.spent_today,
        spent_month=summary.spent_month,
        worst=worst,
    )
    return summary, planned, plain


def assert_every_surface_is_the_plain_simulation(owner_id: int) -> forecast.MonthForecast:
    summary, planned, plain = plain_month(owner_id)
    _, _, worst = plain_month(owner_id, worst=True)
    month = forecast.month_forecast(owner_id, named=True, table=True)
    assert month.expected == summary.spent_month + plain.spend
    assert month.worst == summary.spent_month + worst.spend
    assert (month.ceiling_reached_on, month.worst_reached_on) == (plain.reached_on, worst.reached_on)
    assert (month.daily_days, month.worst_daily_days) == (len(plain.daily_days), len(worst.daily_days))
    assert month.runs.run == sum(plain.runs.values())
    assert month.runs.refused == sum(plain.refused.values())
    assert month.runs.skipped == sum(plain.skipped.values())
    by_pk = {p.pk: p for p in planned}
    for pk, item in by_pk.items():
        found = forecast.schedule_forecast(Schedule.objects.select_related("current_revision").get(pk=pk))
        assert found.expected == item.spent + plain.spent[pk], pk
        assert found.worst == item.spent + worst.spent[pk], pk
        assert (found.runs.run, found.runs.refused, found.runs.skipped) == (
            plain.runs.get(pk, 0),
            plain.refused.get(pk, 0),
            plain.skipped.get(pk, 0),
        ), pk
        assert (found.worst_runs.run, found.worst_runs.refused) == (
            worst.runs.get(pk, 0),
            worst.refused.get(pk, 0),
        )
    stopped = {pk: plain.refused.get(pk, 0) + plain.skipped.get(pk, 0) for pk in by_pk}
    assert month.stopped_count == sum(1 for n in stopped.values() if n)
    for named in month.stopped:
        assert named.refused + named.skipped == stopped[named.schedule.pk]
    most = sorted((n for n in stopped.values() if n), reverse=True)[: forecast.STOPPED_SHOWN]
    assert [s.refused + s.skipped for s in month.stopped] == most
    for schedule, row in month.largest:
        assert row.expected - row.spent == plain.spent[schedule.pk]
    spends = sorted((plain.spent[pk] for pk in by_pk), reverse=True)[: forecast.SHOWN]
    assert sorted((row.expected - row.spent for _, row in month.largest), reverse=True) == spends
    return month


def complete_a_run(schedule: Schedule, cost: str) -> None:
    occurrence = materialize(schedule)
    Run.objects.filter(pk=occurrence.run_id).update(cost=Decimal(cost))
    finish(occurrence)


@time_machine.travel(DEC_10, tick=False)
def test_a_group_the_daily_ceiling_cuts_into_stops_its_last_members(owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 100
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=20, monthly_ceiling=250)
    schedules = [make_schedule(owner, agent, title=f"Digest {n}", cron="0 9 * * *") for n in range(6)]
    for schedule in schedules[:2]:  # two of them cost USD 1 a run; the rest, with no history, USD 5
        complete_a_run(schedule, "1.00")

    month = assert_every_surface_is_the_plain_simulation(owner.pk)

    # Each day the six share USD 20: 1 + 1 + 5 + 5 + 5 leave no room for the sixth's USD 5 limit;
    # at USD 17 a day the month reaches USD 238 on Dec 23, and 250 on Dec 24 after four runs.
    assert month.stopped[0].schedule.pk == schedules[5].pk
    assert month.daily_days == 14
    assert month.ceiling_reached_on == date(2026, 12, 24)


@time_machine.travel(DEC_10, tick=False)
def test_schedules_of_every_kind_within_tight_ceilings(owner, agent, admin_user, settings):
    settings.MAX_ACTIVE_SCHEDULES = 100
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=Decimal("12.50"), monthly_ceiling=120)
    spend(owner.pk, "30.00", at=DEC_10 - timedelta(days=2))
    spend(owner.pk, "4.00", at=DEC_10 - timedelta(minutes=30))
    hourly = [make_schedule(owner, agent, title=f"Hourly {n}", cron="15 * * * *") for n in range(3)]
    complete_a_run(hourly[0], "0.30")
    complete_a_run(hourly[1], "2.00")
    night = make_schedule(owner, agent, title="Night", cron="0 2 * * *", tz="America/New_York")
    capped = make_schedule(owner, agent, title="Capped", cron="0 9 * * 1-5")
    body = {
        "limits": limits(max_cost="2.50").to_json(),
        "max_consecutive_failures": 2,
        "reason": "An allowance.",
        "monthly_cap": "12.00",
    }
    services.pin_revision(capped, parse_explicit(body), by=admin_user, via="admin")
    spend(owner.pk, "3.00", schedule_id=capped.pk, at=DEC_10 - timedelta(days=1))
    make_schedule(owner, agent, title="Once", cron=None, run_at=DEC_10 + timedelta(days=3))
    services.pause_schedule(night, by=owner)

    month = assert_every_surface_is_the_plain_simulation(owner.pk)

    assert month.runs.refused and month.runs.skipped and month.ceiling_reached_on is not None
