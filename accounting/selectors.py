"""Read-only queries for the owner's pages: their time zone, spend per schedule, the daily chart.

Each function is a fixed number of queries, whatever the number of ledger entries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from django.core.cache import cache
from django.db import connection
from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest
from django.utils import timezone

from accounting import alerts, ledger, rollups
from accounting.ledger import ZERO, day_bounds, month_bounds
from accounting.models import (
    BudgetAlert,
    LedgerEntry,
    OwnerBudget,
    Reservation,
    SpendRollup,
    UsageRollup,
)
from accounting.timezones import default_time_zone, is_time_zone, owner_zone


def request_budget(request: HttpRequest) -> OwnerBudget:
    """The signed-in owner's budget row (ledger.budget_row), read once per request: a page's
    time zone and its top bar's figures and alerts come from the same query."""
    cached: OwnerBudget | None = getattr(request, "_owner_budget", None)
    if cached is None:
        cached = ledger.budget_row(_signed_in(request), recent_alerts=alerts.recent_alerts())
        request._owner_budget = cached  # type: ignore[attr-defined]
    return cached


def request_summary(request: HttpRequest) -> ledger.BudgetSummary:
    """The signed-in owner's ceilings, spend and reservations, computed once per request (the top
    bar and the budget page show the same figures)."""
    cached: ledger.BudgetSummary | None = getattr(request, "_budget_summary", None)
    if cached is None:
        cached = ledger.summarize(_signed_in(request), budget=request_budget(request))
        request._budget_summary = cached  # type: ignore[attr-defined]
    return cached


def request_alerts(request: HttpRequest) -> list[BudgetAlert]:
    """The thresholds the signed-in owner crossed this day and month (accounting.alerts), read once
    per request: the top bar and the budget page show the same."""
    cached: list[BudgetAlert] | None = getattr(request, "_budget_alerts", None)
    if cached is None:
        recent = alerts.recent_of(request_budget(request).recent_alerts)  # type: ignore[attr-defined]
        cached = alerts.crossed(_signed_in(request), request_summary(request), recent=recent)
        request._budget_alerts = cached  # type: ignore[attr-defined]
    return cached


def _signed_in(request: HttpRequest) -> int:
    owner_id = request.user.pk
    assert owner_id is not None, "owner pages are login_required"
    return int(owner_id)


def owner_timezone(owner: int | OwnerBudget | HttpRequest) -> str:
    """The one answer to "which time zone are this owner's days and times in": the IANA name on
    their budget row (given, read once per request for the signed-in owner, or one query by owner
    id), or DEFAULT_OWNER_TIME_ZONE before they have one or when the stored name is no longer a
    zone (old data): always a name that ZoneInfo opens."""
    if isinstance(owner, HttpRequest):
        owner = request_budget(owner)
    if isinstance(owner, OwnerBudget):
        zone: str | None = owner.timezone
    else:
        with connection.cursor() as cursor:  # a plain statement: the run loop's clock asks once per run
            cursor.execute(_TIMEZONE_SQL, [owner])
            row = cursor.fetchone()
        zone = row[0] if row else None
    return zone_or_default(zone)


def zone_or_default(zone: str | None) -> str:
    """A stored time zone name, or DEFAULT_OWNER_TIME_ZONE when there is none or it is no longer
    a zone (old data)."""
    return zone if zone and is_time_zone(zone) else default_time_zone()


_TIMEZONE_SQL = f'SELECT timezone FROM "{OwnerBudget._meta.db_table}" WHERE owner_id = %s'  # noqa: S608 - model metadata


INTERACTIVE = rollups.INTERACTIVE  # chart bucket of spend outside any schedule
OTHER = 0  # chart bucket of the schedules outside the top few


def cost_this_month(
    owner_id: int, schedule_ids: Iterable[int] | None, tz: str, *, now: datetime | None = None
) -> dict[int, Decimal]:
    """Spend per schedule in the owner's current calendar month (one query over the rollups); None:
    every schedule of the owner (no list of thousands of ids to send and plan)."""
    zone = owner_zone(tz)
    start, end = month_bounds((now or timezone.now()).astimezone(zone).date(), zone)
    keys = SpendRollup.objects.filter(owner_id=owner_id, key__gt=0)
    if schedule_ids is not None:
        ids = [i for i in schedule_ids if i > 0]
        if not ids:
            return {}
        keys = keys.filter(key__in=ids)
    rows = (
        keys.filter(rollups.cover(start, end))
        .values("key")
        .annotate(total=Sum("cost"))
        .values_list("key", "total")
        .order_by()
    )
    return {int(key): total or ZERO for key, total in rows}


# -- spend by model and by kind of token ------------------------------------------------------------

TOKEN_KINDS = ("input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning")
# Dollars by kind: cache writes of both lifetimes together; reasoning is billed inside output.
COST_KINDS = ("input", "cache_read", "cache_write", "output")


@dataclass(frozen=True)
class ModelSpend:
    """One model's calls this month: tokens by kind (input counts all of it, the cache counts are
    parts of it; output counts reasoning too) and dollars by kind (uncached input, cache reads,
    cache writes, output)."""

    provider: str
    model: str
    calls: int
    cost: Decimal
    tokens: dict[str, int]
    cost_by_kind: dict[str, Decimal]

    @property
    def uncached_input(self) -> int:
        t = self.tokens
        return t["input"] - t["cache_read"] - t["cache_write_5m"] - t["cache_write_1h"]


@dataclass(frozen=True)
class MonthUsage:
    models: list[ModelSpend]

    @property
    def cost(self) -> Decimal:
        return sum((m.cost for m in self.models), ZERO)

    @property
    def tokens(self) -> dict[str, int]:
        return {kind: sum(m.tokens[kind] for m in self.models) for kind in TOKEN_KINDS}

    @property
    def cost_by_kind(self) -> dict[str, Decimal]:
        return {kind: sum((m.cost_by_kind[kind] for m in self.models), ZERO) for kind in COST_KINDS}


def month_usage(owner_id: int, tz: str, *, now: datetime | None = None) -> MonthUsage:
    """The owner's spend this month (their time zone) by model and kind of token: one query over
    the usage rollups, a few hundred rows however busy the owner (accounting.models.UsageRollup)."""
    zone = owner_zone(tz)
    start, end = month_bounds((now or timezone.now()).astimezone(zone).date(), zone)
    sums = {f"t_{kind}": Sum(f"{kind}_tokens") for kind in TOKEN_KINDS}
    sums.update({f"c_{kind}": Sum(f"cost_{kind}") for kind in COST_KINDS})
    query: Any = (  # the sums' names are built from TOKEN_KINDS and COST_KINDS
        UsageRollup.objects.filter(owner_id=owner_id)
        .filter(rollups.cover(start, end))
        .values("provider", "model")
        .annotate(calls=Sum("calls"), cost=Sum("cost"), **sums)
        .order_by("-cost", "provider", "model")
    )
    rows: list[dict[str, Any]] = list(query)
    return MonthUsage(
        [
            ModelSpend(
                provider=row["provider"],
                model=row["model"],
                calls=int(row["calls"] or 0),
                cost=row["cost"] or ZERO,
                tokens={kind: int(row[f"t_{kind}"] or 0) for kind in TOKEN_KINDS},
                cost_by_kind={kind: row[f"c_{kind}"] or ZERO for kind in COST_KINDS},
            )
            for row in rows
        ]
    )


def calls_of(run_ids: Iterable[int]) -> dict[int, list[LedgerEntry]]:
    """Each run's provider calls as the ledger recorded them, in order (one indexed query)."""
    calls: dict[int, list[LedgerEntry]] = defaultdict(list)
    for entry in LedgerEntry.objects.filter(run_id__in=list(run_ids)).order_by("id"):
        calls[entry.run_id].append(entry)
    return calls


def open_reservations(owner_id: int, *, limit: int = 20) -> list[Reservation]:
    return list(
        Reservation.objects.filter(owner_id=owner_id, released_at__isnull=True).order_by("-created_at")[
            :limit
        ]
    )


# -- the daily spend chart ------------------------------------------------------------------------

WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 24, 30
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    """One colour of the stack: a schedule, the other schedules, or interactive runs."""

    key: int  # a schedule id, OTHER or INTERACTIVE
    index: int  # its colour, 1-based
    total: Decimal


@dataclass(frozen=True)
class Segment:
    key: int
    index: int
    amount: Decimal
    x: float
    y: float
    width: float
    height: float


@dataclass
class Day:
    day: date
    total: Decimal = ZERO
    segments: list[Segment] = field(default_factory=list)
    label_x: float = 0.0
    labelled: bool = False


class Tick(NamedTuple):
    """A line across the chart: the amount it marks and where it stands."""

    amount: Decimal
    y: float


@dataclass(frozen=True)
class SpendChart:
    days: list[Day]
    series: list[Series]
    ticks: list[Tick]
    total: Decimal
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    baseline: int = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return self.total == 0


def nice_ceiling(value: Decimal) -> Decimal:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above `value` (an axis that reads well)."""
    if value <= 0:
        return Decimal(1)
    magnitude = Decimal(10) ** (value.adjusted())
    for step in (Decimal(1), Decimal(2), Decimal("2.5"), Decimal(5), Decimal(10)):
        if value <= step * magnitude:
            return step * magnitude
    return Decimal(10) * magnitude  # unreachable


def daily_spend(
    owner_id: int, tz: str, *, days: int = 30, top: int = 5, now: datetime | None = None
) -> SpendChart:
    """Spend per day (owner's zone) for the last `days` days, stacked by the `top` schedules that
    spent most, the other schedules, and interactive runs (two or three queries over the rollups).

    The leaders are ranked by their spend in the UTC months the window touches (month rollups:
    one row per schedule and month, however busy); the bars themselves are exact per local day.
    A local day is an exact sum of quarter-hours, up to 96 rows per key and day; the days before
    today no longer change (spend is recorded when it happens), so they are read once per key and
    kept in the cache for PAST_DAYS_SECONDS, and a page reads only today's quarters."""
    zone = owner_zone(tz)
    today = (now or timezone.now()).astimezone(zone).date()
    first = today - timedelta(days=days - 1)
    start, end = day_bounds(first, zone)[0], day_bounds(today, zone)[1]
    mine = SpendRollup.objects.filter(owner_id=owner_id)
    leaders = _leaders(mine, owner_id, zone, today, rollups.month_of(start), end, top)
    keys = [rollups.ALL, rollups.INTERACTIVE, *leaders]
    today_start = day_bounds(today, zone)[0]
    amounts = _past_days(owner_id, zone, keys, first, today)
    for day, per_key in _days_by_key(mine, zone, keys, today_start, end).items():
        amounts[day].update(per_key)
    for per_key in amounts.values():  # "other schedules": what the leaders and interactive leave
        rest = per_key.pop(rollups.ALL, ZERO) - sum(per_key.values(), ZERO)
        if rest > 0:
            per_key[OTHER] = rest
    return _layout(first, days, [int(k) for k in leaders], amounts)


PAST_DAYS_SECONDS = 300


def _leaders(
    mine: QuerySet[SpendRollup],
    owner_id: int,
    zone: ZoneInfo,
    today: date,
    start: datetime,
    end: datetime,
    top: int,
) -> list[int]:
    """The `top` schedules that spent most in the UTC months from `start` to `end` (the colours of
    the chart, not its amounts: "other schedules" takes whatever they leave). Ranking every
    schedule's month rows costs the heaviest owner (10,000 schedules) 13 ms, so the ranking is kept
    for PAST_DAYS_SECONDS like the past days' bars."""
    name = f"spend-leaders:{owner_id}:{zone.key}:{today}:{top}"
    leaders: list[int] | None = cache.get(name)
    if leaders is None:
        leaders = list(
            mine.filter(key__gt=0, grain=rollups.MONTH, start__gte=start, start__lt=end)
            .values("key")
            .annotate(total=Sum("cost"))
            .order_by("-total", "key")
            .values_list("key", flat=True)[:top]
        )
        cache.set(name, leaders, PAST_DAYS_SECONDS)
    return leaders


def _past_days(
    owner_id: int, zone: ZoneInfo, keys: list[int], first: date, today: date
) -> defaultdict[date, dict[int, Decimal]]:
    """Each key's spend per local day from `first` to yesterday: from the cache, else read for the
    keys it lacks (one query) and kept. Keyed by owner, zone and the day it was read on, so a
    change of zone or of day reads afresh."""
    names = {key: f"spend-days:{owner_id}:{zone.key}:{first}:{today}:{key}" for key in keys}
    cached: dict[str, dict[date, Decimal]] = cache.get_many(list(names.values()))
    missing = [key for key in keys if names[key] not in cached]
    if missing:
        start, end = day_bounds(first, zone)[0], day_bounds(today, zone)[0]
        read = _days_by_key(SpendRollup.objects.filter(owner_id=owner_id), zone, missing, start, end)
        fresh = {
            names[key]: {day: per_key[key] for day, per_key in read.items() if key in per_key}
            for key in missing
        }
        cache.set_many(fresh, PAST_DAYS_SECONDS)
        cached.update(fresh)
    amounts: defaultdict[date, dict[int, Decimal]] = defaultdict(dict)
    for key in keys:
        for day, amount in cached[names[key]].items():
            amounts[day][key] = amount
    return amounts


def _days_by_key(
    rows: QuerySet[SpendRollup], zone: ZoneInfo, keys: list[int], start: datetime, end: datetime
) -> defaultdict[date, dict[int, Decimal]]:
    """The keys' quarter-hours in [start, end), summed per local day (one query)."""
    found: defaultdict[date, dict[int, Decimal]] = defaultdict(dict)
    summed = (
        rows.filter(key__in=keys)
        .filter(rollups.quarters(start, end))
        .annotate(day=TruncDate("start", tzinfo=zone))
        .values("day", "key")
        .annotate(total=Sum("cost"))
        .values_list("day", "key", "total")
        .order_by()
    )
    for day, key, total in summed:
        found[day][int(key)] = total or ZERO
    return found


def _layout(
    first: date, days: int, leaders: list[int], amounts: dict[date, dict[int, Decimal]]
) -> SpendChart:
    order = [*leaders, OTHER, INTERACTIVE]
    totals = {key: sum((a.get(key, ZERO) for a in amounts.values()), ZERO) for key in order}
    # Colours 1-5 follow the ranking; "other schedules" and "interactive" keep their own.
    colour = {**{key: i for i, key in enumerate(leaders, start=1)}, OTHER: 6, INTERACTIVE: 7}
    series = [Series(key, colour[key], totals[key]) for key in order if totals[key] > 0]
    peak = max((sum(a.values(), ZERO) for a in amounts.values()), default=ZERO)
    step = nice_ceiling(peak / 4)
    # Whole steps up to the peak, so the top grid line is at or above the tallest bar.
    lines = (
        max(Decimal(1), (peak / step).to_integral_value(rounding=ROUND_CEILING)) if peak > 0 else Decimal(4)
    )
    ceiling = step * lines
    slot = PLOT_W / days
    bar = slot * 0.72
    chart_days: list[Day] = []
    for offset in range(days):
        day = first + timedelta(days=offset)
        entry = Day(day=day, label_x=LEFT + slot * offset + slot / 2, labelled=(days - 1 - offset) % 5 == 0)
        y = float(TOP + PLOT_H)
        for key in order:
            amount = amounts.get(day, {}).get(key, ZERO)
            if amount <= 0:
                continue
            height = float(amount / ceiling) * PLOT_H
            y -= height
            x = LEFT + slot * offset + (slot - bar) / 2
            entry.segments.append(Segment(key, colour[key], amount, x, y, bar, max(height, 0.5)))
            entry.total += amount
        chart_days.append(entry)
    count = int(lines)
    ticks = [Tick(step * i, TOP + PLOT_H - PLOT_H * i / count) for i in range(count + 1)]
    total = sum((d.total for d in chart_days), ZERO)
    return SpendChart(days=chart_days, series=series, ticks=ticks, total=total)
