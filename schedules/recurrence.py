"""Cron recurrence computed in the schedule's own time zone, stored and compared in UTC.

Why our own and not croniter: the contract for daylight-saving days is specific (SPEC §5). A 09:00
schedule runs at 09:00 local time on both sides of a change; a local time that does not exist
(the spring-forward gap) runs at the first instant after the gap; a local time that happens twice
(the autumn fold) runs once, at its first occurrence. Mapping wall-clock candidates to UTC that
way is monotonic, so "the first candidate after a given instant" is a simple forward scan.

Also accepted: a few plain forms ("daily at 09:00", "weekdays at 7:30", "every monday at 18:00",
"hourly", "every 15 minutes"), translated to five-field cron.
"""

from __future__ import annotations

import re
import zoneinfo
from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

MAX_SEARCH_DAYS = 366 * 5  # a cron expression with no slot in five years never fires ("0 0 30 2 *")

_DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_FULL_DAYS = {
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
    "sunday": 0,
}


class InvalidRecurrence(ValueError):
    """A cron expression, plain form or time zone that cannot be used; the message says why."""


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: tuple[int, ...]  # sorted, for bisecting
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        in_weekdays = (day.isoweekday() % 7) in self.weekdays
        # Vixie cron: when both day fields are restricted, either one matching is enough.
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays


def _parse_field(
    text: str, low: int, high: int, names: list[str] | None, label: str
) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    restricted = text != "*"

    def value_of(token: str) -> int:
        lowered = token.lower()
        if names and lowered[:3] in names and lowered.isalpha():
            return names.index(lowered[:3]) + (low if label != "day of week" else 0)
        if not token.isdigit():
            raise InvalidRecurrence(f"cron {label} field has {token!r}, which is not a number")
        number = int(token)
        if label == "day of week" and number == 7:
            return 0
        if not low <= number <= high:
            raise InvalidRecurrence(f"cron {label} must be between {low} and {high}, not {number}")
        return number

    for part in text.split(","):
        if not part:
            raise InvalidRecurrence(f"cron {label} field has an empty list item")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise InvalidRecurrence(f"cron {label} step must be a positive number, not {step_text!r}")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = value_of(first), value_of(last)
            if label == "day of week" and last == "7":
                end = 7
            if start > end:
                raise InvalidRecurrence(f"cron {label} range {base!r} runs backwards")
        else:
            start = value_of(base)
            end = high if step_text else start
        values.update(v % 7 if label == "day of week" else v for v in range(start, end + 1, step))
    return frozenset(values), restricted


_PLAIN_TIME = r"(?P<hour>\d{1,2}):(?P<minute>\d{2})"
_PLAIN_FORMS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^(?:daily|every day) at {_PLAIN_TIME}$"), "{minute} {hour} * * *"),
    (re.compile(rf"^(?:weekdays|every weekday) at {_PLAIN_TIME}$"), "{minute} {hour} * * 1-5"),
    (re.compile(rf"^every (?P<day>[a-z]+) at {_PLAIN_TIME}$"), "{minute} {hour} * * {day}"),
    (re.compile(r"^hourly$"), "0 * * * *"),
    (re.compile(r"^every (?P<n>\d{1,2}) minutes$"), "*/{n} * * * *"),
    (re.compile(r"^every minute$"), "* * * * *"),
]


def normalize(text: str) -> str:
    """Plain forms into five-field cron; cron passes through with its spacing tidied."""
    cleaned = " ".join(text.strip().lower().split())
    if not cleaned:
        raise InvalidRecurrence("a recurrence is required, e.g. '0 9 * * *' or 'daily at 09:00'")
    for pattern, template in _PLAIN_FORMS:
        match = pattern.match(cleaned)
        if not match:
            continue
        parts = match.groupdict()
        if "hour" in parts and not (0 <= int(parts["hour"]) <= 23 and 0 <= int(parts["minute"]) <= 59):
            raise InvalidRecurrence(f"{parts['hour']}:{parts['minute']} is not a time of day")
        if "day" in parts:
            day = _FULL_DAYS.get(parts["day"])
            if day is None:
                raise InvalidRecurrence(f"{parts['day']!r} is not a day of the week")
            parts["day"] = str(day)
        if "hour" in parts:
            parts["hour"], parts["minute"] = str(int(parts["hour"])), str(int(parts["minute"]))
        if "n" in parts and not 1 <= int(parts["n"]) <= 59:
            raise InvalidRecurrence("every N minutes needs N between 1 and 59")
        return template.format(**parts)
    return " ".join(text.split())


@lru_cache(maxsize=1024)
def parse_cron(text: str) -> Cron:
    expression = normalize(text)
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidRecurrence(
            f"cron needs five fields (minute hour day month weekday), not {len(fields)}: {expression!r}"
        )
    minutes, _ = _parse_field(fields[0], 0, 59, None, "minute")
    hours, _ = _parse_field(fields[1], 0, 23, None, "hour")
    days, days_restricted = _parse_field(fields[2], 1, 31, None, "day of month")
    months, _ = _parse_field(fields[3], 1, 12, _MONTH_NAMES, "month")
    weekdays, weekdays_restricted = _parse_field(fields[4], 0, 7, _DAY_NAMES, "day of week")
    return Cron(
        expression,
        tuple(sorted(minutes)),
        tuple(sorted(hours)),
        days,
        months,
        weekdays,
        days_restricted,
        weekdays_restricted,
    )


def parse_timezone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidRecurrence(f"{name!r} is not an IANA time zone (for example Europe/Riga)") from None


def local_to_utc(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """A naive local wall-clock time as a UTC instant: folds take their first occurrence, gaps
    move forward to the first instant after the gap."""
    instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    # Nonexistent. The two folds put the wall time on either side of the change; the change itself
    # is the first instant whose local time is not earlier than the wall time (local time only
    # jumps forward inside a gap, so a binary search over the seconds between them finds it).
    other = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    low, high = min(instant, other), max(instant, other)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0)


def next_slot(cron: Cron, zone: zoneinfo.ZoneInfo, after: datetime) -> datetime | None:
    """The first slot strictly after `after` (aware), in UTC, or None if there is none in 5 years."""
    local_after = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    hours, minutes = cron.hours, cron.minutes
    day = local_after.date()
    for offset in range(MAX_SEARCH_DAYS):
        if cron.matches_date(day):
            first_day = offset == 0
            for hour in hours[bisect_left(hours, local_after.hour) if first_day else 0 :]:
                same_hour = first_day and hour == local_after.hour
                for minute in minutes[bisect_left(minutes, local_after.minute) if same_hour else 0 :]:
                    instant = local_to_utc(datetime.combine(day, time(hour, minute)), zone)
                    if instant > after:
                        return instant
        day += timedelta(days=1)
    return None


def slots_between(cron: Cron, zone: zoneinfo.ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
    """Every slot in (after, until], oldest first, each instant once."""
    slots: list[datetime] = []
    cursor = after
    while True:
        slot = next_slot(cron, zone, cursor)
        if slot is None or slot > until:
            return slots
        slots.append(slot)
        cursor = slot


def validate(cron_text: str, timezone_name: str, *, now: datetime) -> str:
    """The normalized cron expression if it parses and fires at least once; else InvalidRecurrence."""
    cron = parse_cron(cron_text)
    zone = parse_timezone(timezone_name)
    if next_slot(cron, zone, now) is None:
        raise InvalidRecurrence(f"cron {cron.expression!r} never fires")
    return cron.expression


# -- in words -----------------------------------------------------------------------------------

_WEEKDAY_WORDS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def describe(cron_text: str, timezone_name: str) -> str:
    """ "Every day at 09:00, Europe/Riga" for the common shapes; the expression itself otherwise."""
    try:
        cron = parse_cron(cron_text)
    except InvalidRecurrence:
        return f"{cron_text} ({timezone_name})"
    fields = cron.expression.split()
    every_day = fields[2] == "*" and fields[3] == "*"
    single_time = len(cron.hours) == 1 and len(cron.minutes) == 1
    at = f"{next(iter(cron.hours)):02d}:{next(iter(cron.minutes)):02d}" if single_time else ""
    if every_day and single_time:
        if fields[4] == "*":
            return f"Every day at {at}, {timezone_name}"
        if cron.weekdays == frozenset({1, 2, 3, 4, 5}):
            return f"Weekdays at {at}, {timezone_name}"
        if cron.weekdays == frozenset({0, 6}):
            return f"Weekends at {at}, {timezone_name}"
        names = ", ".join(_WEEKDAY_WORDS[d] for d in sorted(cron.weekdays, key=lambda d: (d + 6) % 7))
        return f"Every {names} at {at}, {timezone_name}"
    if fields[1:] == ["*", "*", "*", "*"]:
        if fields[0] == "*":
            return f"Every minute, {timezone_name}"
        if fields[0].startswith("*/"):
            return f"Every {fields[0][2:]} minutes, {timezone_name}"
        if len(cron.minutes) == 1:
            return f"Every hour at :{next(iter(cron.minutes)):02d}, {timezone_name}"
    if single_time and fields[3] == "*" and fields[4] == "*" and len(cron.days) == 1:
        return f"Monthly on day {next(iter(cron.days))} at {at}, {timezone_name}"
    return f"Cron {cron.expression}, {timezone_name}"
