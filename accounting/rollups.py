"""Spend rollups: the ledger summed per owner (and per schedule) in UTC buckets, kept exact in
the same transaction as every ledger entry (accounting.ledger), so admission, the top bar, the
budget page and the API read a few hundred rows instead of a month of ledger entries.

Why UTC quarter-hours: every time zone's offset is a whole number of quarter-hours (+5:30,
+5:45, +12:45 and DST shifts of 30 or 60 minutes included), so any owner-local day or month
starts and ends on a UTC quarter-hour boundary and is an exact sum of whole buckets, whatever the
owner's zone, and nothing needs rebuilding when the owner changes it. Day and month buckets
(UTC) keep long windows short: a local month is its whole UTC days plus the quarter-hours at
either edge, at most 31 + 192 rows.

Keys: 0 is all of the owner's spend, a positive key is a schedule's id, INTERACTIVE (-1) is the
spend of runs outside any schedule.
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q

ALL = 0
INTERACTIVE = -1
QUARTER, DAY, MONTH = "q", "d", "m"
QUARTER_HOUR = timedelta(minutes=15)


def quarter_of(at: datetime) -> datetime:
    utc = at.astimezone(UTC)
    return utc.replace(minute=utc.minute - utc.minute % 15, second=0, microsecond=0)


def day_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def month_of(at: datetime) -> datetime:
    return day_of(at).replace(day=1)


def key_of(schedule_id: int | None) -> int:
    return schedule_id if schedule_id is not None else INTERACTIVE


@dataclass(frozen=True)
class Bucket:
    owner_id: int
    key: int
    grain: str
    start: datetime
    cost: Decimal


def buckets(owner_id: int, schedule_id: int | None, at: datetime, cost: Decimal) -> list[Bucket]:
    """The rows one ledger entry adds its cost to, in a fixed order (so two writers that share
    rows take their locks in the same order and cannot deadlock)."""
    key = key_of(schedule_id)
    rows = [
        Bucket(owner_id, ALL, DAY, day_of(at), cost),
        Bucket(owner_id, ALL, QUARTER, quarter_of(at), cost),
        Bucket(owner_id, key, DAY, day_of(at), cost),
        Bucket(owner_id, key, MONTH, month_of(at), cost),
        Bucket(owner_id, key, QUARTER, quarter_of(at), cost),
    ]
    return sorted(rows, key=lambda b: (b.key, b.grain, b.start))


def _next_midnight(at: datetime) -> datetime:
    midnight = day_of(at)
    return midnight if midnight == at.astimezone(UTC) else midnight + timedelta(days=1)


def cover(start: datetime, end: datetime) -> Q:
    """The buckets whose sum is exactly the spend in [start, end), both on quarter-hour
    boundaries: whole UTC days inside, quarter-hours at the edges."""
    ranges = [
        Q(grain=grain, start__gte=low, start__lt=high) for grain, low, high in _cover_ranges(start, end)
    ]
    return functools.reduce(operator.or_, ranges)


def cover_sql(start: datetime, end: datetime) -> tuple[str, list[Any]]:
    """`cover` as an SQL condition and its parameters, for a hot path that cannot afford building a
    queryset (the budget alerts judged after every charge)."""
    ranges = _cover_ranges(start, end)
    sql = " OR ".join(["(grain = %s AND start >= %s AND start < %s)"] * len(ranges))
    return f"({sql})", [value for bucket in ranges for value in bucket]


def _cover_ranges(start: datetime, end: datetime) -> list[tuple[str, datetime, datetime]]:
    if quarter_of(start) != start or quarter_of(end) != end:
        raise ValueError(f"{start.isoformat()} to {end.isoformat()} is not on UTC quarter-hour boundaries")
    first_day, last_day = _next_midnight(start), day_of(end)
    if first_day >= last_day:
        return [(QUARTER, start, end)]
    return [(QUARTER, start, first_day), (DAY, first_day, last_day), (QUARTER, last_day, end)]


def quarters(start: datetime, end: datetime) -> Q:
    """The quarter-hour buckets of [start, end): for sums split by local day."""
    return Q(grain=QUARTER, start__gte=start, start__lt=end)


def from_entries(
    entries: Iterable[tuple[int, int | None, datetime, Decimal]],
) -> dict[tuple[int, int, str, datetime], Decimal]:
    """The rollup rows a set of ledger entries (owner, schedule, created_at, cost) adds up to:
    what `check_rollups` compares with, and what `--repair` writes."""
    totals: dict[tuple[int, int, str, datetime], Decimal] = defaultdict(Decimal)
    for owner_id, schedule_id, at, cost in entries:
        for bucket in buckets(owner_id, schedule_id, at, cost):
            totals[(bucket.owner_id, bucket.key, bucket.grain, bucket.start)] += bucket.cost
    return dict(totals)
