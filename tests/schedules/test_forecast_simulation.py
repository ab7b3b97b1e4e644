"""The month's forecast within the ceilings (docs/contract.md#forecast), held against a slow
simulation written plainly here: every slot of every schedule walked with the tick's recurrence,
placed on its owner-local day, and admitted, refused or skipped fire by fire under the rule the
forecast documents (a run is admitted only if the day's and the month's spend + its `max_cost` fit
under the ceilings, a capped schedule's fire is skipped first when its spend + `max_cost` would be
above its cap, an admitted run spends its expected cost, or its `max_cost` in the worst case;
within a day, schedules in the order of their first run of the day, each with all its runs)."""

from __future__ import annotations

import zoneinfo
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting.ledger import month_bounds
from schedules import recurrence
from schedules.forecast.cadence import Cadence, month_fires
from schedules.forecast.inputs import Input, lots_of
from schedules.forecast.simulation import ZERO, simulate

ZONES = ["UTC", "Europe/Riga", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"]
# Instants to forecast from: ordinary days, the last minutes of a month, and months with a clock
# change in one zone or another (Europe and New York in March and October/November, Lord Howe's
# half hour in April and October).
NOWS = [
    datetime(2026, 12, 4, 8, 0, tzinfo=UTC),
    datetime(2026, 12, 31, 21, 50, tzinfo=UTC),
    datetime(2027, 3, 1, 0, 0, tzinfo=UTC),
    datetime(2027, 3, 13, 15, 7, tzinfo=UTC),
    datetime(2027, 4, 2, 23, 59, tzinfo=UTC),
    datetime(2026, 10, 20, 12, 0, tzinfo=UTC),
    datetime(2027, 2, 27, 11, 0, tzinfo=UTC),
]
CRONS = st.builds(
    lambda minute, hour, day, weekday: f"{minute} {hour} {day} * {weekday}",
    st.sampled_from(["0", "15", "0,30", "*/20", "7,37", "59"]),
    st.sampled_from(["*", "9", "0,12", "8-17", "*/6", "23", "2,3"]),
    st.sampled_from(["*", "1,15", "*/2", "10-20", "31"]),
    st.sampled_from(["*", "1-5", "0,6", "mon"]),
)
MONEY = st.sampled_from([Decimal(v) for v in ("0", "0.25", "0.60", "1.00", "2.50", "5.00")])


@dataclass(frozen=True)
class Planned:
    pk: int
    cadence: Cadence
    max_cost: Decimal
    per_fire: Decimal
    cap: Decimal | None
    spent: Decimal


@st.composite
def schedules(draw: st.DrawFn, now: datetime) -> list[Planned]:
    found = []
    for pk in range(1, draw(st.integers(1, 6)) + 1):
        zone = draw(st.sampled_from(ZONES))
        if draw(st.booleans()) and pk > 1 and draw(st.booleans()):
            cadence = found[0].cadence  # schedules sharing a cadence share a lot
        elif draw(st.integers(0, 4)) == 0:
            run_at = now + timedelta(minutes=draw(st.integers(-600, 40 * 24 * 60)))
            cadence = Cadence("one_time", "", zone, run_at.replace(second=0, microsecond=0))
        else:
            cadence = Cadence("recurring", draw(CRONS), zone, None)
        max_cost = draw(st.sampled_from([Decimal("1.00"), Decimal("2.50"), Decimal("5.00")]))
        per_fire = min(draw(MONEY), max_cost)
        cap = None
        spent = ZERO
        if draw(st.integers(0, 2)) == 0:
            cap = max_cost + draw(st.sampled_from([Decimal(v) for v in ("0", "3.00", "12.50", "40.00")]))
            spent = draw(st.sampled_from([ZERO, Decimal("2.00"), cap]))
        found.append(Planned(pk, cadence, max_cost, per_fire, cap, spent))
    return found


@dataclass
class Plain:
    """What the plain simulation finds."""

    spend: Decimal
    by_day: dict[date, Decimal]
    runs: dict[int, int]
    spent: dict[int, Decimal]
    refused: dict[int, int]
    skipped: dict[int, int]
    daily_days: list[date]
    reached_on: date | None


def plain_simulation(
    planned: list[Planned],
    *,
    now: datetime,
    zone: zoneinfo.ZoneInfo,
    daily: Decimal,
    monthly: Decimal,
    spent_today: Decimal,
    spent_month: Decimal,
    worst: bool,
) -> Plain:
    today = now.astimezone(zone).date()
    _, month_end = month_bounds(today, zone)
    fires = []
    for item in planned:
        cadence = item.cadence
        if cadence.kind == "one_time":
            assert cadence.run_at is not None
            slots = [cadence.run_at] if now < cadence.run_at < month_end else []
        else:
            cron, own = recurrence.parse_cron(cadence.cron), recurrence.parse_timezone(cadence.timezone)
            slots = recurrence.slots_between(cron, own, now, month_end - timedelta(microseconds=1))
        # Within a day: schedules by the time of day of their first run, ties in a fixed order.
        order = (
            cadence.first_minute,
            item.max_cost,
            cadence.key,
            item.pk if item.cap is not None else 0,
            item.pk,
        )
        fires += [(slot.astimezone(zone).date(), order, item.pk) for slot in slots]
    fires.sort()
    by_pk = {item.pk: item for item in planned}
    runs: dict[int, int] = defaultdict(int)
    spent = {item.pk: item.spent for item in planned}
    refused: dict[int, int] = defaultdict(int)
    skipped: dict[int, int] = defaultdict(int)
    by_day: dict[date, Decimal] = defaultdict(Decimal)
    daily_days: list[date] = []
    reached_on = today if spent_month >= monthly else None
    last_admitted = None
    month = spent_month
    day_spend: dict[date, Decimal] = defaultdict(Decimal, {today: spent_today})
    for day, _, pk in fires:
        item = by_pk[pk]
        if item.cap is not None and spent[pk] + item.max_cost > item.cap:
            skipped[pk] += 1
        elif day_spend[day] + item.max_cost > daily:
            refused[pk] += 1
            if day not in daily_days:
                daily_days.append(day)
        elif month + item.max_cost > monthly:
            refused[pk] += 1
            if reached_on is None:
                reached_on = last_admitted or today
        else:
            cost = item.max_cost if worst else item.per_fire
            runs[pk] += 1
            spent[pk] += cost
            day_spend[day] += cost
            month += cost
            if cost:
                by_day[day] += cost
            last_admitted = day
    return Plain(
        spend=month - spent_month,
        by_day=dict(by_day),
        runs=dict(runs),
        spent={pk: spent[pk] - by_pk[pk].spent for pk in spent},
        refused=dict(refused),
        skipped=dict(skipped),
        daily_days=daily_days,
        reached_on=reached_on,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    now=st.sampled_from(NOWS),
    zone_name=st.sampled_from(ZONES),
    daily=st.sampled_from([Decimal(v) for v in ("2.00", "4.00", "5.00", "12.50", "20.00", "1000.00")]),
    monthly=st.sampled_from([Decimal(v) for v in ("10.00", "60.00", "250.00", "100000.00")]),
    spent_month=st.sampled_from([Decimal(v) for v in ("0", "4.00", "55.00", "300.00")]),
    worst=st.booleans(),
)
def test_the_forecast_is_the_plain_simulation_and_never_exceeds_a_ceiling(
    data, now, zone_name, daily, monthly, spent_month, worst
):
    planned = data.draw(schedules(now))
    spent_today = min(spent_month, data.draw(st.sampled_from([ZERO, Decimal("1.50"), Decimal("25.00")])))
    zone = zoneinfo.ZoneInfo(zone_name)
    today = now.astimezone(zone).date()
    _, month_end = month_bounds(today, zone)
    days = [today + timedelta(days=i) for i in range((month_end.date() - today).days)]
    counted = {}

    def fires_of(cadence: Cadence) -> dict[date, int]:
        if cadence not in counted:
            counted[cadence] = month_fires(cadence, day=today, zone=zone).left(now)
        return counted[cadence]

    inputs = [Input(p.pk, p.cadence, p.max_cost, p.cap, p.per_fire) for p in planned]
    spent = {p.pk: p.spent for p in planned}
    lots, placed = lots_of(inputs, fires_of, lambda pk: spent[pk])
    # Both simulations see the same month: these ceilings, this spend so far, each run at its cost
    # limit or not.
    month = {
        "daily": daily,
        "monthly": monthly,
        "spent_today": spent_today,
        "spent_month": spent_month,
        "worst": worst,
    }
    found = simulate(lots, days=days, **month)
    plain = plain_simulation(planned, now=now, zone=zone, **month)

    assert found.spend == plain.spend
    assert found.by_day == plain.by_day
    assert found.daily_days == plain.daily_days
    assert found.reached_on == plain.reached_on
    for item in planned:
        where = placed[item.pk]
        share = found.lots[where.lot].member(
            lots[where.lot], where.position, item.max_cost if worst else item.per_fire
        )
        expected = (
            plain.runs.get(item.pk, 0),
            plain.spent[item.pk],
            plain.refused.get(item.pk, 0),
            plain.skipped.get(item.pk, 0),
        )
        assert (share.runs, share.spend, share.refused, share.skipped) == expected, item
    # Within the ceilings: no day above the daily ceiling (today: unless it already was), the month
    # not above the monthly one (unless it already was), no capped schedule above its cap.
    for day, amount in found.by_day.items():
        assert amount + (spent_today if day == today else ZERO) <= max(daily, spent_today)
    assert spent_month + found.spend <= max(monthly, spent_month)
    for item in planned:
        if item.cap is not None:
            assert item.spent + plain.spent[item.pk] <= max(item.cap, item.spent)


def test_the_owner_of_the_issue_is_told_usd_250_reached_on_dec_16():
    """USD 20 a day, USD 250 a month, one schedule every 2 minutes at USD 5.00 a run with no
    history, on Dec 4: USD 20 a day until Dec 15, the last USD 10 on Dec 16."""
    now = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)  # 10:00 in Riga
    zone = zoneinfo.ZoneInfo("Europe/Riga")
    cadence = Cadence("recurring", "*/2 * * * *", "Europe/Riga", None)
    fires = month_fires(cadence, day=now.astimezone(zone).date(), zone=zone).left(now)
    lots, _ = lots_of([Input(1, cadence, Decimal("5.00"), None, Decimal("5.00"))], lambda c: fires)
    days = [date(2026, 12, d) for d in range(4, 32)]
    found = simulate(
        lots, days=days, spent_today=ZERO, spent_month=ZERO, daily=Decimal(20), monthly=Decimal(250)
    )
    assert found.spend == Decimal("250.00")
    assert found.reached_on == date(2026, 12, 16)
    assert found.daily_days == [date(2026, 12, d) for d in range(4, 16)]
    assert found.runs == 50
    assert found.refused == sum(fires.values()) - 50 == 419 + 27 * 720 - 50
