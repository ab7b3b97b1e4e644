"""When a schedule fires within the owner's month, counted per owner-local day.

The forecast needs, for each cadence (a cron in its zone, or a one-time instant), how many times it
fires on each day of the owner's month, in the owner's zone, and when exactly it fires today (so
that a page counts only what is still ahead). Walking every slot is out of the question on a page
(a schedule firing every minute has 43,000 slots a month), so a day of the schedule's own zone is
counted from the cron's fields: its fires are that day's midnight plus each of the cron's times,
and the owner's day boundaries cut them with a bisection. A day on which the schedule's zone
changes its clocks is walked slot by slot with the tick's own recurrence
(schedules.recurrence.slots_between), so daylight saving's moved and merged fires count exactly
as the tick will run them.
"""

from __future__ import annotations

import zoneinfo
from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property

from accounting.ledger import month_bounds
from schedules import recurrence
from schedules.models import Schedule

ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cadence:
    """When a schedule fires: a cron in its zone (recurring), or one instant (one-time)."""

    kind: str
    cron: str
    timezone: str
    run_at: datetime | None

    @property
    def key(self) -> str:
        """Its identity as text, for a fixed order among cadences."""
        if self.kind == Schedule.Kind.ONE_TIME:
            return f"{self.kind}|{self.run_at.astimezone(UTC).isoformat() if self.run_at else ''}"
        return f"{self.kind}|{self.cron}|{self.timezone}"

    @cached_property
    def first_minute(self) -> int:
        """The minute of the day (in the schedule's zone) of its first run of a day: the order in
        which the simulation takes schedules within a day (schedules.forecast.simulation)."""
        if self.kind == Schedule.Kind.ONE_TIME:
            if self.run_at is None:
                return 0
            local = self.run_at.astimezone(recurrence.parse_timezone(self.timezone))
            return local.hour * 60 + local.minute
        cron = recurrence.parse_cron(self.cron)
        return cron.hours[0] * 60 + cron.minutes[0]


@dataclass(frozen=True)
class MonthFires:
    """One schedule's fires in the owner's month: a count per owner-local day (index 0 is the 1st),
    and the instants (epoch seconds, ascending) of its fires on `day`."""

    first: date
    per_day: tuple[int, ...]
    day: date
    today: tuple[int, ...]

    def left(self, now: datetime, dates: list[date] | None = None) -> dict[date, int]:
        """The fires from `now` (on `day`) to the month's end, by owner-local date (`dates`: the days
        of the month, if the caller has them at hand)."""
        after = now.timestamp()
        found: dict[date, int] = {}
        ahead = len(self.today) - bisect_left(self.today, after + 1e-6)
        if ahead:
            found[self.day] = ahead
        if dates is None:
            dates = [self.first + timedelta(days=i) for i in range(len(self.per_day))]
        start = (self.day - self.first).days + 1
        found.update((day, n) for day, n in zip(dates[start:], self.per_day[start:], strict=True) if n)
        return found


def month_fires(cadence: Cadence, *, day: date, zone: zoneinfo.ZoneInfo) -> MonthFires:
    """The fires of `cadence` in the owner's month that holds `day` (owner-local), in `zone`."""
    start, end = month_bounds(day, zone)
    first = start.date()
    length = (end.date() - first).days
    bounds = [datetime.combine(first + timedelta(days=i), time.min, tzinfo=zone) for i in range(length + 1)]
    edges = [b.timestamp() for b in bounds]
    today_index = (day - first).days
    per_day = [0] * length
    today: list[int] = []

    def place(instants: list[float]) -> None:
        for instant in instants:
            index = bisect_left(edges, instant + 1e-6) - 1  # the day whose start is at or before it
            if 0 <= index < length:
                per_day[index] += 1
                if index == today_index:
                    today.append(int(instant))

    if cadence.kind == Schedule.Kind.ONE_TIME:
        if cadence.run_at is not None:
            place([cadence.run_at.timestamp()])
        return MonthFires(first, tuple(per_day), day, tuple(today))
    cron = recurrence.parse_cron(cadence.cron)
    own = recurrence.parse_timezone(cadence.timezone)
    times = [hour * 3600 + minute * 60 for hour in cron.hours for minute in cron.minutes]  # ascending
    local = start.astimezone(own).date() - timedelta(days=1)
    last = end.astimezone(own).date()
    while local <= last:
        if local.day in cron.days_in(local.year, local.month):
            midnight = datetime.combine(local, time.min, tzinfo=own)
            late = (midnight.astimezone(UTC) + timedelta(hours=24, seconds=-1)).astimezone(own)
            if midnight.utcoffset() == late.utcoffset():
                # No clock change that day: its fires are its midnight plus each of the cron's times.
                base = midnight.timestamp()
                _count_window(base, times, edges, per_day, today_index, today)
            else:
                # A clock change: the tick's own recurrence decides where each fire lands.
                low = recurrence.local_to_utc(datetime.combine(local, time.min), own)
                high = recurrence.local_to_utc(datetime.combine(local + timedelta(days=1), time.min), own)
                slots = recurrence.slots_between(cron, own, low - ONE_MICROSECOND, high - ONE_MICROSECOND)
                place([slot.timestamp() for slot in slots])
        local += timedelta(days=1)
    return MonthFires(first, tuple(per_day), day, tuple(sorted(today)))


def _count_window(
    base: float, times: list[int], edges: list[float], per_day: list[int], today_index: int, today: list[int]
) -> None:
    """Add the fires base + t (t in `times`, seconds) to the owner days whose bounds are `edges`."""
    last = base + times[-1]
    low = bisect_left(edges, base + 1e-6) - 1
    for index in range(max(low, 0), len(per_day)):
        if edges[index] > last:
            break
        begin = bisect_left(times, edges[index] - base)
        finish = bisect_left(times, edges[index + 1] - base)
        if finish > begin:
            per_day[index] += finish - begin
            if index == today_index:
                today.extend(int(base + t) for t in times[begin:finish])
