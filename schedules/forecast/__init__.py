"""What the owner's schedules will cost this month (docs/contract.md#money-the-owner-sees-coming).

A schedule's forecast for the owner's current calendar month: `expected` = its spend so far + its
remaining fires x the median cost of its last 20 completed runs (its `max_cost` when it has none);
`worst` = spend so far + remaining fires x `max_cost`; both capped by its `monthly_cap`. A paused or
completed schedule has no remaining fires. The month's forecast adds the remaining part of each
active schedule's to everything spent this month, and finds the first date on which the expected
spend reaches the monthly ceiling.

Fires are counted per date from the cron's fields (hours x minutes on each matching date), not by
walking every slot: a schedule firing every minute has 43,000 fires in a month, and the budget page
must not walk them. Today's fires are walked (at most 1,440). A daylight-saving change moves a fire
or merges two; the count per date ignores that (a forecast, not a bill).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.utils import timezone

from accounting import ledger
from accounting.ledger import ZERO, month_bounds
from accounting.models import OwnerBudget, owner_zone
from accounting.selectors import cost_this_month, owner_timezone
from runs.models import Run
from schedules import recurrence
from schedules.models import Occurrence, Schedule, ScheduleRevision

RECENT_RUNS = 20  # the runs whose median cost is a schedule's expected cost per fire
SHOWN = 25  # schedules in the budget page's table


@dataclass(frozen=True)
class Forecast:
    """One schedule's month: spent so far, expected and worst at month end, its cap, and the
    remaining fires by owner-local date with what each is expected to cost."""

    spent: Decimal
    expected: Decimal
    worst: Decimal
    monthly_cap: Decimal | None
    per_fire: Decimal  # expected cost of one fire
    max_cost: Decimal
    fires: dict[date, int] = field(default_factory=dict)

    @property
    def remaining_fires(self) -> int:
        return sum(self.fires.values())

    @property
    def cap_used(self) -> int | None:
        """Percent of the cap spent (for a bar); None without a cap."""
        if not self.monthly_cap:
            return None
        return min(100, int(self.spent * 100 / self.monthly_cap))


@dataclass(frozen=True)
class MonthForecast:
    spent: Decimal
    expected: Decimal
    worst: Decimal
    ceiling: Decimal
    ceiling_reached_on: date | None
    schedules: list[tuple[Planned, Forecast]] = field(default_factory=list)  # the active ones

    @property
    def coming(self) -> Decimal:
        """What the active schedules are expected to spend from now to the month's end."""
        return self.expected - self.spent

    @property
    def worst_extra(self) -> Decimal:
        return self.worst - self.expected

    @property
    def largest(self) -> list[tuple[Planned, Forecast]]:
        """The schedules expected to spend most this month, for a table that stays short."""
        return sorted(self.schedules, key=lambda pair: (-pair[1].expected, pair[0].title))[:SHOWN]

    @property
    def not_shown(self) -> int:
        return max(0, len(self.schedules) - SHOWN)

    def share(self, amount: Decimal) -> int:
        """`amount` as a percentage of the ceiling, for the bar (at most 100)."""
        return min(100, int(amount * 100 / self.ceiling)) if self.ceiling > 0 else 100


@dataclass(frozen=True)
class Planned:
    """What a forecast needs of a schedule and its revision in force: read as plain values for an
    owner with thousands of schedules (a model instance each costs more than the forecast)."""

    pk: int
    title: str
    kind: str
    status: str
    next_occurrence_at: datetime | None
    cron: str
    timezone: str
    max_cost: Decimal
    monthly_cap: Decimal | None


def planned_of(schedule: Schedule) -> Planned | None:
    revision = schedule.current_revision
    if revision is None:
        return None
    return Planned(
        pk=schedule.pk,
        title=schedule.title,
        kind=schedule.kind,
        status=schedule.status,
        next_occurrence_at=schedule.next_occurrence_at,
        cron=revision.cron,
        timezone=revision.timezone,
        max_cost=revision.run_limits.max_cost,
        monthly_cap=revision.monthly_cap,
    )


def _planned_active(owner_id: int) -> list[Planned]:
    """The owner's active schedules as Planned, in one query of plain values."""
    rows = (
        Schedule.objects.filter(
            owner_id=owner_id, status=Schedule.Status.ACTIVE, current_revision__isnull=False
        )
        .order_by("title", "id")
        .values_list(
            "pk",
            "title",
            "kind",
            "next_occurrence_at",
            "current_revision__cron",
            "current_revision__timezone",
            "current_revision__limits__max_cost",
            "current_revision__monthly_cap",
        )
    )
    return [
        Planned(pk, title, kind, Schedule.Status.ACTIVE, next_at, cron, tz, Decimal(str(cost)), cap)
        for pk, title, kind, next_at, cron, tz, cost, cap in rows
    ]


def _capped(amount: Decimal, spent: Decimal, cap: Decimal | None) -> Decimal:
    return amount if cap is None else min(amount, max(cap, spent))


def fires_left(
    revision: ScheduleRevision | Planned | None,
    *,
    kind: str,
    next_at: datetime | None,
    now: datetime,
    zone_name: str,
) -> dict[date, int]:
    """The fires from now to the end of the owner's month, by the owner-local date (`next_at`: a
    one-time schedule's slot; a recurring one's fires follow from its cron and zone alone)."""
    if revision is None:
        return {}
    zone = owner_zone(zone_name)
    _, month_end = month_bounds(now.astimezone(zone).date(), zone)
    if kind == Schedule.Kind.ONE_TIME:
        return {next_at.astimezone(zone).date(): 1} if next_at and now <= next_at < month_end else {}
    cron = recurrence.parse_cron(revision.cron)
    own = recurrence.parse_timezone(revision.timezone)
    fires: dict[date, int] = {}
    # The rest of today (the schedule's today) slot by slot, then whole days by the cron's fields.
    tomorrow = datetime.combine(now.astimezone(own).date() + timedelta(days=1), datetime.min.time(), own)
    today_ends = min(tomorrow, month_end)
    for slot in recurrence.slots_between(cron, own, now, today_ends):
        if slot < today_ends:  # (now, today_ends]: midnight belongs to the days below
            day = slot.astimezone(zone).date()
            fires[day] = fires.get(day, 0) + 1
    per_day = len(cron.hours) * len(cron.minutes)
    day = tomorrow.date()
    while datetime.combine(day, datetime.min.time(), own) < month_end:
        if day.day in cron.days_in(day.year, day.month):
            local = datetime.combine(day, datetime.min.time(), own).astimezone(zone).date()
            fires[local] = fires.get(local, 0) + per_day
        day += timedelta(days=1)
    return fires


def per_fire_costs(schedule_ids: list[int]) -> dict[int, Decimal]:
    """The median cost of each schedule's last RECENT_RUNS completed runs (one query; a schedule
    with none is absent). Reads each schedule's newest occurrences by its index, however many it has."""
    if not schedule_ids:
        return {}
    sql = f"""
        SELECT s.id, recent.cost FROM unnest(%s::bigint[]) AS s(id)
        CROSS JOIN LATERAL (
            SELECT r.cost FROM "{Occurrence._meta.db_table}" o
            JOIN "{Run._meta.db_table}" r ON r.id = o.run_id
            WHERE o.schedule_id = s.id AND o.outcome = %s
            ORDER BY o.scheduled_for DESC LIMIT %s
        ) AS recent"""  # noqa: S608 - table names from model metadata
    costs: dict[int, list[Decimal]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [schedule_ids, Occurrence.Outcome.COMPLETED, RECENT_RUNS])
        for schedule_id, cost in cursor.fetchall():
            costs.setdefault(schedule_id, []).append(cost)
    return {
        key: Decimal(statistics.median(values)).quantize(Decimal("0.000001")) for key, values in costs.items()
    }


def forecast_of(
    *,
    spent: Decimal,
    max_cost: Decimal,
    monthly_cap: Decimal | None,
    per_fire: Decimal | None,
    fires: dict[date, int],
) -> Forecast:
    count = sum(fires.values())
    unit = per_fire if per_fire is not None else max_cost
    return Forecast(
        spent=spent,
        expected=_capped(spent + count * unit, spent, monthly_cap),
        worst=_capped(spent + count * max_cost, spent, monthly_cap),
        monthly_cap=monthly_cap,
        per_fire=unit,
        max_cost=max_cost,
        fires=fires,
    )


def schedule_forecasts(
    owner_id: int, schedules: list[Schedule], *, now: datetime | None = None, zone_name: str | None = None
) -> dict[int, Forecast]:
    """Each schedule's forecast (their revisions are read if not already): three queries in all."""
    planned = [p for p in (planned_of(s) for s in schedules) if p is not None]
    return forecasts_of(owner_id, planned, now=now, zone_name=zone_name)


def forecasts_of(
    owner_id: int,
    planned: list[Planned],
    *,
    now: datetime | None = None,
    zone_name: str | None = None,
    all_spend: bool = False,
) -> dict[int, Forecast]:
    """The forecasts of `planned` (two queries: their spend this month, with `all_spend` read for every
    schedule of the owner instead of by id, and their recent runs' median)."""
    now = now or timezone.now()
    zone_name = zone_name or owner_timezone(owner_id)
    spent = cost_this_month(owner_id, None if all_spend else [p.pk for p in planned], zone_name, now=now)
    per_fire = per_fire_costs([p.pk for p in planned if p.status == Schedule.Status.ACTIVE])
    found: dict[int, Forecast] = {}
    # A recurring schedule's fires from now on depend only on its cron and zone: an owner with
    # thousands of schedules has a few distinct ones, each counted once.
    counted: dict[tuple[str, str], dict[date, int]] = {}
    for plan in planned:
        if plan.status != Schedule.Status.ACTIVE:
            fires: dict[date, int] = {}
        elif plan.kind == Schedule.Kind.RECURRING:
            key = (plan.cron, plan.timezone)
            if key not in counted:
                counted[key] = fires_left(plan, kind=plan.kind, next_at=None, now=now, zone_name=zone_name)
            fires = counted[key]
        else:
            fires = fires_left(
                plan, kind=plan.kind, next_at=plan.next_occurrence_at, now=now, zone_name=zone_name
            )
        found[plan.pk] = forecast_of(
            spent=spent.get(plan.pk, ZERO),
            max_cost=plan.max_cost,
            monthly_cap=plan.monthly_cap,
            per_fire=per_fire.get(plan.pk),
            fires=fires,
        )
    return found


def reached_on(start: Decimal, ceiling: Decimal, forecasts: list[Forecast]) -> date | None:
    """The first date on which `start` plus each schedule's expected fires, placed on their dates and
    each stopped at its cap, reaches `ceiling`; None if it does not this month."""
    if start >= ceiling:
        return None if ceiling <= 0 else date.min
    by_date: dict[date, Decimal] = {}
    # Forecasts that share their fires (one cron) and run to the month's end uncapped add up per
    # fire first: thousands of schedules cost a few passes over the month's dates.
    uncapped: dict[int, tuple[dict[date, int], Decimal]] = {}
    for forecast in forecasts:
        if forecast.monthly_cap is None:
            fires, unit = uncapped.get(id(forecast.fires), (forecast.fires, ZERO))
            uncapped[id(forecast.fires)] = (fires, unit + forecast.per_fire)
            continue
        room = forecast.expected - forecast.spent
        for day in sorted(forecast.fires):
            amount = min(room, forecast.fires[day] * forecast.per_fire)
            if amount <= 0:
                break
            by_date[day] = by_date.get(day, ZERO) + amount
            room -= amount
    for fires, unit in uncapped.values():
        for day, count in fires.items():
            by_date[day] = by_date.get(day, ZERO) + count * unit
    total = start
    for day in sorted(by_date):
        total += by_date[day]
        if total >= ceiling:
            return day
    return None


def month_forecast(
    owner_id: int,
    *,
    now: datetime | None = None,
    extra: Forecast | None = None,
    budget: OwnerBudget | None = None,
    summary: ledger.BudgetSummary | None = None,
) -> MonthForecast:
    """The owner's month: everything spent (schedules and interactive runs) plus the remaining part of
    each active schedule's expected and worst; `extra` adds a schedule not yet created (a proposal).
    A page passes the `budget` and `summary` it already read (three more queries then)."""
    now = now or timezone.now()
    budget = budget or ledger.budget_row(owner_id)
    summary = summary or ledger.summarize(owner_id, now=now, budget=budget)
    zone_name = owner_timezone(budget)
    schedules = _planned_active(owner_id)
    by_schedule = forecasts_of(owner_id, schedules, now=now, zone_name=zone_name, all_spend=True)
    forecasts = list(by_schedule.values())
    if extra is not None:
        forecasts.append(extra)
    spent = summary.spent_month
    expected = spent + sum((f.expected - f.spent for f in forecasts), ZERO)
    worst = spent + sum((f.worst - f.spent for f in forecasts), ZERO)
    found = reached_on(spent, summary.monthly_ceiling, forecasts)
    if found == date.min:  # reached already
        found = now.astimezone(owner_zone(zone_name)).date()
    return MonthForecast(
        spent=spent,
        expected=expected,
        worst=worst,
        ceiling=summary.monthly_ceiling,
        ceiling_reached_on=found,
        schedules=[(s, by_schedule[s.pk]) for s in schedules if s.pk in by_schedule],
    )
