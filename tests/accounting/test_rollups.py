"""The spend rollups are exact: whatever the entries, their times, the owner's zone (half- and
quarter-hour offsets, DST days) or a change of zone, every figure read from the rollups equals
the ledger's own SUM over the same local day or month."""

from __future__ import annotations

import zoneinfo
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting import ledger, selectors
from accounting.ledger import day_bounds, month_bounds
from accounting.models import LedgerEntry, OwnerBudget, SpendRollup
from tests.factories import make_user, spend

pytestmark = pytest.mark.django_db

ZONES = [
    "UTC",
    "Europe/Riga",
    "America/New_York",
    "Asia/Kolkata",  # +5:30
    "Asia/Kathmandu",  # +5:45
    "Pacific/Chatham",  # +12:45 / +13:45
    "Australia/Lord_Howe",  # a 30-minute DST shift
    "America/Santiago",
]
# DST changes of 2026 in several of those zones, so "now" and the entries straddle them.
TRANSITIONS = [
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # New York, spring
    datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # Europe, spring
    datetime(2026, 4, 4, 15, 0, tzinfo=UTC),  # Lord Howe, autumn
    datetime(2026, 4, 4, 14, 0, tzinfo=UTC),  # Chatham, autumn
    datetime(2026, 10, 25, 1, 0, tzinfo=UTC),  # Europe, autumn
    datetime(2026, 11, 1, 6, 0, tzinfo=UTC),  # New York, autumn
    datetime(2026, 12, 31, 23, 50, tzinfo=UTC),  # a year's end
]


class Rollback(Exception):
    pass


def ledger_sum(owner_id: int, start: datetime, end: datetime, **extra: object) -> Decimal:
    total = LedgerEntry.objects.filter(
        owner_id=owner_id, created_at__gte=start, created_at__lt=end, **extra
    ).aggregate(total=Sum("cost"))["total"]
    return total or Decimal(0)


entries = st.lists(
    st.tuples(
        st.floats(min_value=-40 * 24, max_value=2, allow_nan=False),  # hours from "now"
        st.sampled_from([None, 1, 2, 3]),  # schedule slot (None: interactive)
        st.decimals(min_value=Decimal("0.000001"), max_value=Decimal("3"), places=6, allow_nan=False),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=entries,
    zone=st.sampled_from(ZONES),
    later_zone=st.sampled_from(ZONES),
    around=st.sampled_from(TRANSITIONS),
    shift=st.floats(min_value=-30, max_value=30, allow_nan=False),
)
def test_every_figure_read_from_the_rollups_equals_the_ledger(entries, zone, later_zone, around, shift):
    now = around + timedelta(hours=shift)
    try:
        with transaction.atomic():
            owner = make_user(tz=zone)
            schedule_ids = {slot: slot * 1000 + owner.pk for slot in (1, 2, 3)}
            for hours, slot, cost in entries:
                at = now + timedelta(hours=hours)
                spend(owner.pk, cost, schedule_id=schedule_ids.get(slot) if slot else None, at=at)
            for tz in (zone, later_zone):  # the owner moves: nothing is rebuilt, all stays exact
                OwnerBudget.objects.filter(owner=owner).update(timezone=tz)
                _check(owner.pk, tz, now, list(schedule_ids.values()))
            raise Rollback
    except Rollback:
        pass


def _check(owner_id: int, tz: str, now: datetime, schedule_ids: list[int]) -> None:
    zone = zoneinfo.ZoneInfo(tz)
    today = now.astimezone(zone).date()
    summary = ledger.summarize(owner_id, now=now)
    assert summary.spent_today == ledger_sum(owner_id, *day_bounds(today, zone))
    assert summary.spent_month == ledger_sum(owner_id, *month_bounds(today, zone))
    month = month_bounds(today, zone)
    per_schedule = selectors.cost_this_month(owner_id, schedule_ids, tz, now=now)
    for schedule_id in schedule_ids:
        assert per_schedule.get(schedule_id, Decimal(0)) == ledger_sum(
            owner_id, *month, schedule_id=schedule_id
        )
    chart = selectors.daily_spend(owner_id, tz, days=30, top=2, now=now)  # a third one is "other"
    leaders = [s.key for s in chart.series if s.key > 0]
    for day in chart.days:
        assert day.total == ledger_sum(owner_id, *day_bounds(day.day, zone)), day.day
        by_key: dict[int, Decimal] = defaultdict(Decimal)
        for segment in day.segments:
            by_key[segment.key] += segment.amount
        bounds = day_bounds(day.day, zone)
        assert by_key.get(selectors.INTERACTIVE, Decimal(0)) == ledger_sum(
            owner_id, *bounds, schedule_id=None
        )
        for key, amount in by_key.items():
            if key > 0:
                assert amount == ledger_sum(owner_id, *bounds, schedule_id=key)
        others = [i for i in schedule_ids if i not in leaders]
        expected_other = sum((ledger_sum(owner_id, *bounds, schedule_id=i) for i in others), Decimal(0))
        assert by_key.get(selectors.OTHER, Decimal(0)) == expected_other


def test_every_zone_starts_its_days_on_a_utc_quarter_hour():
    """What makes local days exact sums of quarter-hour buckets."""
    from accounting.rollups import quarter_of
    from accounting.timezones import time_zone_names

    for name in sorted(time_zone_names()):
        zone = zoneinfo.ZoneInfo(name)
        for offset in range(0, 400 * 3, 3):  # every third day of 2026-2029
            start = day_bounds(date(2026, 1, 1) + timedelta(days=offset), zone)[0]
            assert quarter_of(start) == start.astimezone(UTC), (name, start)


def test_check_rollups_passes_on_a_true_ledger_and_repairs_a_broken_one(owner):
    spend(owner.pk, "1.25", schedule_id=7)
    spend(owner.pk, "0.50")
    call_command("check_rollups", stdout=open("/dev/null", "w"))  # noqa: SIM115
    SpendRollup.objects.filter(owner=owner, key=0, grain="d").update(cost=Decimal("9.99"))
    with pytest.raises(CommandError, match="differ from the ledger for 1 owner"):
        call_command("check_rollups")
    call_command("check_rollups", "--repair", stdout=open("/dev/null", "w"))  # noqa: SIM115
    call_command("check_rollups", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert ledger.summarize(owner.pk).spent_today == Decimal("1.75")


def _bars(chart: selectors.SpendChart) -> dict[date, dict[int, Decimal]]:
    return {d.day: {s.key: s.amount for s in d.segments} for d in chart.days if d.segments}


@pytest.mark.django_db
def test_the_chart_reads_past_days_once_and_today_on_every_page(django_assert_num_queries):
    owner = make_user(tz="Asia/Kolkata")
    now = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    for days_ago, cost in ((3, "1.25"), (1, "0.40"), (0, "0.10")):
        spend(owner.pk, cost, schedule_id=7, at=now - timedelta(days=days_ago, minutes=5))
    with django_assert_num_queries(3):  # leaders, the past days, today
        first = selectors.daily_spend(owner.pk, "Asia/Kolkata", now=now)
    spend(owner.pk, "2.00", at=now)  # spend happens now: only today's bar can move
    with django_assert_num_queries(1):  # today (the leaders' ranking is kept too)
        second = selectors.daily_spend(owner.pk, "Asia/Kolkata", now=now)

    today = now.astimezone(zoneinfo.ZoneInfo("Asia/Kolkata")).date()
    assert {d: v for d, v in _bars(second).items() if d != today} == {
        d: v for d, v in _bars(first).items() if d != today
    }
    assert sum(_bars(second)[today].values()) == Decimal("2.10")
    for day in second.days:  # and still exact
        assert day.total == ledger_sum(owner.pk, *day_bounds(day.day, zoneinfo.ZoneInfo("Asia/Kolkata")))
    # Another zone is read afresh, as exact in its own days.
    with django_assert_num_queries(3):
        riga = selectors.daily_spend(owner.pk, "Europe/Riga", now=now)
    for day in riga.days:
        assert day.total == ledger_sum(owner.pk, *day_bounds(day.day, zoneinfo.ZoneInfo("Europe/Riga")))
