"""Cron recurrence computed in the schedule's own time zone, stored and compared in UTC.

The grammar is Vixie five-field cron as Debian cron and cronsim (healthchecks' cron library) read
it: numbers, `*`, ranges, steps, lists, whole three-letter month and day names, 0 or 7 for Sunday.
When both day fields are restricted (neither starts with `*`) a day matches if either matches;
otherwise both must. Refused, each with its reason: `L`, `W`, `#`, `?`, a seconds field, `@`
nicknames, empty steps and non-ASCII digits. Also accepted: a few plain forms ("daily at 09:00",
"weekdays at 7:30", "every monday at 18:00", "hourly", "every 15 minutes"), translated to cron.

Why our own parser and not cronsim's: we refuse more than cronsim accepts (it reads `L`, `W`, `#`
and six fields), every refusal names the field and the reason (cronsim says "Bad day-of-month"),
and `describe` needs the parsed fields, which cronsim does not publish. Its public interface, an
iterator of datetimes, also handles daylight saving differently from docs/contract.md#schedules (below). So
                                                                                     # parsing
and matching are ours, and tests/schedules/test_cron_differential.py proves them fire for fire
equal to cronsim over random expressions, zones and instants, the DST rules below being the only
differences it allows.

Why our own DST mapping: the contract for daylight-saving days is specific (docs/contract.md#schedules). A
                                                                                            # 09:00
schedule runs at 09:00 local time on both sides of a change; a local time that does not exist
(the spring-forward gap) runs at the first instant after the gap; a local time that happens twice
(the autumn fold) runs once, at its first occurrence. Mapping wall-clock candidates to UTC that
way is monotonic, so "the first candidate after a given instant" is a simple forward scan.
"""

from __future__ import annotations

import calendar
import itertools
import re
import zoneinfo
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, date, datetime, time, timedelta
from functools import cached_property, lru_cache

from accounting.timezones import parse_time_zone

# The Gregorian calendar repeats, weekdays included, every 400 years (146,097 days are exactly
# 20,871 weeks). So a day pattern with no match in 400 years has none ever ("0 0 30 2 *"), and one
# that has a match is found within 400 years from any date, however rare it is: Feb 29 across 2100
# is eight years away, Feb 29 on a Sunday ("0 0 29 2 */7") up to 40.
CALENDAR_CYCLE_MONTHS = 400 * 12

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_FULL_DAYS = {
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
    "sunday": 0,
}
# Other schedulers' extensions, refused by name so the owner learns why (Vixie cron has none).
_EXTENSIONS = {
    "L": "'L' (the last day or weekday of the month) is not supported",
    "LW": "'LW' (the last weekday of the month) is not supported",
    "W": "'W' (the weekday nearest a day) is not supported",
    "?": "'?' is not supported; write '*'",
}
# The @ nicknames are refused rather than expanded so that the stored definition is always the
# five fields that run; the refusal says which ones to write.
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class InvalidRecurrence(ValueError):
    """A cron expression, plain form or time zone that cannot be used; the message says why."""


@dataclass(frozen=True)
class _Field:
    label: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name: int = 0  # the number names[0] stands for
    names_hint: str = ""


_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY = _Field("day of month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTH_NAMES, 1, " or a month name (jan-dec)")
_WEEKDAY = _Field("day of week", 0, 7, _DAY_NAMES, 0, " or a day name (sun-sat)")  # 7 is Sunday too


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: tuple[int, ...]  # sorted, for bisecting
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    # For the either/both rule of the day fields, a field counts as restricted unless it starts
    # with "*", as in Vixie cron's code: "*/2" counts as unrestricted, though it picks odd days.
    days_restricted: bool
    weekdays_restricted: bool

    def days_in(self, year: int, month: int) -> tuple[int, ...]:
        """The days of a month that match, ascending."""
        if month not in self.months:
            return ()
        first_weekday, length = calendar.monthrange(year, month)
        return self._days_by_shape[first_weekday, length]

    @cached_property
    def _days_by_shape(self) -> dict[tuple[int, int], tuple[int, ...]]:
        # Which days of a month match depends only on its length and the weekday of its 1st
        # (calendar's, Monday = 0; day d then falls on cron's weekday (first + d) % 7, Sunday = 0):
        # 28 shapes, computed once, so that scanning centuries of months is cheap.
        return {
            (first, length): tuple(d for d in range(1, length + 1) if self._matches(d, (first + d) % 7))
            for first in range(7)
            for length in range(28, 32)
        }

    @cached_property
    def shortest_interval(self) -> timedelta:
        """The shortest wall-clock time between two consecutive fires ("*/5 * * * *": 5 minutes;
        "55 23 * * *" with "5 0 * * *" on the next day: 10). Across midnight only when two
        consecutive days can both fire (judged over two years, every month boundary and weekday
        pattern included). Daylight-saving changes are not counted: they move wall clocks, not
        the interval the owner asked for."""
        times = [hour * 60 + minute for hour in self.hours for minute in self.minutes]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        dates = [date(y, m, d) for y in (2028, 2029) for m in range(1, 13) for d in self.days_in(y, m)]
        if any(later - earlier == timedelta(days=1) for earlier, later in itertools.pairwise(dates)):
            gaps.append(times[0] + 24 * 60 - times[-1])
        return timedelta(minutes=min(gaps, default=24 * 60))

    def _matches(self, day: int, weekday: int) -> bool:
        in_days = day in self.days
        in_weekdays = weekday in self.weekdays
        # Vixie cron: when both day fields are restricted, either one matching is enough.
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays


def _parse_field(text: str, field: _Field) -> frozenset[int]:
    for char in text:
        if not char.isascii():
            raise InvalidRecurrence(f"cron {field.label} field has {char!r}, which is not part of cron")
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(item, field))
    return frozenset(values)


def _parse_item(item: str, field: _Field) -> range:
    if not item:
        raise InvalidRecurrence(f"cron {field.label} field has an empty list item")
    if "#" in item:
        raise InvalidRecurrence(
            f"cron {field.label} field has {item!r}: '#' (the nth weekday of the month) is not supported"
        )
    base, slash, step_text = item.partition("/")
    step = _step(step_text, item, field) if slash else 1
    if base == "*":
        return range(field.low, field.high + 1, step)
    first, dash, last = base.partition("-")
    start = _value(first, item, field)
    if not dash:
        # "N/step" runs from N to the end of the field, as in cronie, Debian cron and cronsim.
        return range(start, (field.high if slash else start) + 1, step)
    end = _value(last, item, field)
    if start > end:
        raise InvalidRecurrence(f"cron {field.label} range {base!r} runs backwards")
    return range(start, end + 1, step)


def _step(text: str, item: str, field: _Field) -> int:
    if not text:
        raise InvalidRecurrence(f"cron {field.label} field has {item!r}, whose step is empty")
    if not text.isdigit() or int(text) == 0:
        raise InvalidRecurrence(f"cron {field.label} step must be a positive number, not {text!r}")
    return int(text)


def _value(token: str, item: str, field: _Field) -> int:
    if not token:
        raise InvalidRecurrence(f"cron {field.label} field has {item!r}, which is missing a number")
    if token.lower() in field.names:  # whole names only: "junk" is not June
        return field.names.index(token.lower()) + field.first_name
    if token.isdigit():  # ASCII only: _parse_field refused anything else
        number = int(token)
        if not field.low <= number <= field.high:
            raise InvalidRecurrence(
                f"cron {field.label} must be between {field.low} and {field.high}, not {number}"
            )
        return number
    extension = _EXTENSIONS.get(token.upper().strip("0123456789"))
    if extension:
        raise InvalidRecurrence(f"cron {field.label} field has {item!r}: {extension}")
    raise InvalidRecurrence(
        f"cron {field.label} field has {token!r}, which is not a number{field.names_hint}"
    )


_PLAIN_TIME = r"(?P<hour>[0-9]{1,2}):(?P<minute>[0-9]{2})"
_PLAIN_FORMS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^(?:daily|every day) at {_PLAIN_TIME}$"), "{minute} {hour} * * *"),
    (re.compile(rf"^(?:weekdays|every weekday) at {_PLAIN_TIME}$"), "{minute} {hour} * * 1-5"),
    (re.compile(rf"^every (?P<day>[a-z]+) at {_PLAIN_TIME}$"), "{minute} {hour} * * {day}"),
    (re.compile(r"^hourly$"), "0 * * * *"),
    (re.compile(r"^every (?P<n>[0-9]{1,2}) minutes$"), "*/{n} * * * *"),
    (re.compile(r"^every minute$"), "* * * * *"),
]


def normalize(text: str) -> str:
    """Plain forms into five-field cron; cron passes through with its spacing tidied."""
    cleaned = " ".join(text.strip().lower().split())
    if not cleaned:
        raise InvalidRecurrence("a recurrence is required, e.g. '0 9 * * *' or 'daily at 09:00'")
    for char in cleaned:
        # Python's int() reads Arabic-Indic and full-width digits and fails on superscripts;
        # cron reads none of them.
        if char.isnumeric() and not char.isascii():
            raise InvalidRecurrence(f"{char!r} is not a digit cron reads: write numbers with 0-9")
    for pattern, template in _PLAIN_FORMS:
        match = pattern.fullmatch(cleaned)
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


def _nickname_refusal(word: str) -> InvalidRecurrence:
    word = word.lower()
    if word == "@reboot":
        return InvalidRecurrence("@reboot is not supported: a schedule runs at set times, not at start-up")
    if word in _NICKNAMES:
        return InvalidRecurrence(f"{word} is not supported: write it as {_NICKNAMES[word]!r}")
    return InvalidRecurrence(f"{word!r} is not supported: write five fields (minute hour day month weekday)")


@lru_cache(maxsize=1024)
def parse_cron(text: str) -> Cron:
    expression = normalize(text)
    if expression.startswith("@"):
        raise _nickname_refusal(expression.split()[0])
    fields = expression.split()
    if len(fields) != 5:
        seconds = " (a seconds field is not supported)" if len(fields) == 6 else ""
        raise InvalidRecurrence(
            f"cron needs five fields (minute hour day month weekday), not {len(fields)}{seconds}: "
            f"{expression!r}"
        )
    minute, hour, day, month, weekday = fields
    return Cron(
        expression,
        tuple(sorted(_parse_field(minute, _MINUTE))),
        tuple(sorted(_parse_field(hour, _HOUR))),
        _parse_field(day, _DAY),
        _parse_field(month, _MONTH),
        frozenset(value % 7 for value in _parse_field(weekday, _WEEKDAY)),
        days_restricted=not day.startswith("*"),
        weekdays_restricted=not weekday.startswith("*"),
    )


def parse_timezone(name: str) -> zoneinfo.ZoneInfo:
    """An IANA zone (accounting.timezones: the one parser of zone names), or InvalidRecurrence."""
    try:
        return parse_time_zone(name)
    except ValueError:
        raise InvalidRecurrence(
            f"{str(name)[:64]!r} is not an IANA time zone (for example Europe/Riga)"
        ) from None


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


def _matching_dates(cron: Cron, start: date) -> Iterator[date]:
    """The dates from `start` on that match, ascending, for one calendar cycle (see above)."""
    year, month = start.year, start.month
    for _ in range(CALENDAR_CYCLE_MONTHS + 1):
        for day in cron.days_in(year, month):
            if (year, month, day) >= (start.year, start.month, start.day):
                yield date(year, month, day)
        if (year, month) == (MAXYEAR, 12):
            return
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


def next_slot(cron: Cron, zone: zoneinfo.ZoneInfo, after: datetime) -> datetime | None:
    """The first slot strictly after `after` (aware), in UTC, or None if the cron never fires."""
    local_after = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    hours, minutes = cron.hours, cron.minutes
    for day in _matching_dates(cron, local_after.date()):
        first_day = day == local_after.date()
        for hour in hours[bisect_left(hours, local_after.hour) if first_day else 0 :]:
            same_hour = first_day and hour == local_after.hour
            for minute in minutes[bisect_left(minutes, local_after.minute) if same_hour else 0 :]:
                # In the second pass of a fold the first candidates map to instants before
                # `after` (they already ran in the first pass): skip them.
                instant = local_to_utc(datetime.combine(day, time(hour, minute)), zone)
                if instant > after:
                    return instant
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
        step = re.fullmatch(r"\*/(\d+)", fields[0])
        if step and 60 % int(step[1]) == 0:  # evenly spaced through the hour (*/7 is not)
            every = f"{step[1]} minutes" if int(step[1]) > 1 else "minute"
            return f"Every {every}, {timezone_name}"
        if len(cron.minutes) == 1:
            return f"Every hour at :{next(iter(cron.minutes)):02d}, {timezone_name}"
    if single_time and fields[3] == "*" and fields[4] == "*" and len(cron.days) == 1:
        return f"Monthly on day {next(iter(cron.days))} at {at}, {timezone_name}"
    return f"Cron {cron.expression}, {timezone_name}"
