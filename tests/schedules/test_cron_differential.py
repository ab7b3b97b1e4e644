"""Our cron against cronsim (healthchecks' cron library, which follows Debian cron), over random
expressions, time zones and start instants.

1. The grammar. Over random strings of cron tokens we accept what cronsim accepts, except the
   extensions we refuse by name (`L`, `W`) and days no chosen month has (cronsim refuses those at
   parse time; for us they never fire). Where both accept, the fires agree in UTC.

2. The fires in zones with odd offsets and daylight saving, from cronsim's wall clock. cronsim
   walking naive local time says which wall times match; docs/contract.md#schedules, implemented here
                                                                         # independently
   from the zone's transition table, says when each runs: a wall time that happens once at that
   instant, one that happens twice (the autumn fold) once at its first occurrence, one that does
   not exist (the spring gap) at the first instant after the gap. Ours must be exactly that.

3. The fires against cronsim's own DST handling. cronsim walks the wall clock when neither the
   minute nor the hour field starts with `*` (Debian cron's rule for fixed-time jobs), and then
   its rules are docs/contract.md#schedules's. Otherwise it walks absolute time, and
                                 # docs/contract.md#schedules differs in exactly two
   ways, which are applied to cronsim's fires to get ours:
   - a wall time in the fold runs once, at its first occurrence; cronsim runs its second too;
   - a wall time in the gap runs at the first instant after the gap; cronsim skips it.

Known cronsim defects the comparisons step around, each named where it is handled: a stepped
range of one value, an instant before the start when started inside a fold, and missteps of its
absolute-time walk where a change does not fall on a whole local hour (Chatham, Lord Howe).
"""

from __future__ import annotations

import itertools
import zoneinfo
from datetime import UTC, datetime, timedelta
from functools import cache

from cronsim import CronSim, CronSimError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schedules.recurrence import InvalidRecurrence, next_slot, parse_cron

ZONES = (
    "UTC",
    "Asia/Kolkata",  # +5:30, no DST
    "Asia/Kathmandu",  # +5:45, no DST
    "Pacific/Chatham",  # +12:45 / +13:45, the change at 02:45 / 03:45 local
    "Europe/Riga",
    "America/New_York",
    "Australia/Lord_Howe",  # +10:30 / +11, a 30-minute change
)
FIRES = 8  # compared per example
EXAMPLES = 500  # per property
FIRST, LAST = datetime(2025, 1, 1, tzinfo=UTC), datetime(2029, 1, 1, tzinfo=UTC)  # start instants
HORIZON = datetime(2060, 1, 1, tzinfo=UTC)  # the transition table ends here
CRONSIM_GIVES_UP_YEARS = 50
# cronsim defect: where a change does not fall on a whole local hour, its absolute-time walk
# resets the minute into the gap or the fold and steps on an hour at a time from there, so it
# misses an hour ("* 4 * * *" from Chatham's change) or resumes at half past ("* 0 * * *" across
# Lord Howe's fold). Property 2 covers these zones for every expression.
OFF_THE_HOUR_CHANGES = frozenset({"Pacific/Chatham", "Australia/Lord_Howe"})
WALL_TIMES_LOOKED_AT = FIRES + 3 * 60  # enough for a fold's and a gap's worth of every-minute times

DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


# -- the zones' transitions ------------------------------------------------------------------------


@cache
def transitions(name: str) -> tuple[datetime, ...]:
    """Every UTC instant in [2024, HORIZON) at which the zone's offset changes."""
    zone = zoneinfo.ZoneInfo(name)
    found: list[datetime] = []
    day = datetime(2024, 1, 1, tzinfo=UTC)
    while day < HORIZON:
        following = day + timedelta(days=1)
        if day.astimezone(zone).utcoffset() != following.astimezone(zone).utcoffset():
            low, high = day, following
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == low.astimezone(zone).utcoffset():
                    low = middle
                else:
                    high = middle
            found.append(high.replace(microsecond=0))
        day = following
    return tuple(found)


@cache
def offsets(name: str) -> frozenset[timedelta]:
    zone = zoneinfo.ZoneInfo(name)
    return frozenset(
        instant.astimezone(zone).utcoffset() or timedelta(0) for instant in (FIRST, *transitions(name))
    )


@cache
def all_gaps(name: str) -> tuple[tuple[datetime, datetime, datetime], ...]:
    """(instant, first missing wall time, first wall time after) of each spring gap."""
    zone = zoneinfo.ZoneInfo(name)
    found = []
    for instant in transitions(name):
        before = (instant - timedelta(seconds=1)).astimezone(zone)
        at = instant.astimezone(zone)
        if (at.utcoffset() or timedelta(0)) > (before.utcoffset() or timedelta(0)):
            found.append(
                (instant, before.replace(tzinfo=None) + timedelta(seconds=1), at.replace(tzinfo=None))
            )
    return tuple(found)


def gaps(name: str, after: datetime, until: datetime) -> list[tuple[datetime, datetime, datetime]]:
    return [gap for gap in all_gaps(name) if after < gap[0] <= until]


def spec_instant(wall: datetime, name: str) -> datetime:
    """docs/contract.md#schedules for one naive wall time, from the transition table (not from our code's
    search)."""
    zone = zoneinfo.ZoneInfo(name)
    candidates = [(wall - offset).replace(tzinfo=UTC) for offset in offsets(name)]
    real = [c for c in candidates if c.astimezone(zone).replace(tzinfo=None) == wall]
    if real:
        return min(real)  # twice in a fold: once, at the first
    for instant, missing_from, present_from in all_gaps(name):
        if missing_from <= wall < present_from:
            return instant  # in a gap: the first instant after it
    raise AssertionError(f"{wall} in {name} is neither a wall time nor in a known gap")


# -- random expressions ---------------------------------------------------------------------------


@st.composite
def items(draw: st.DrawFn, low: int, high: int, names: tuple[str, ...], first_name: int, near: int) -> str:
    """One list item of a field: *, */s, n, a-b, a-b/s or n/s. Numbers are drawn near `near`
    half of the time, so that hours fall on the DST changes (01:00-04:00) often."""
    numbers = st.one_of(st.integers(low, high), st.integers(max(low, near - 2), min(high, near + 2)))

    def token(number: int) -> str:
        index = number - first_name
        if names and 0 <= index < len(names) and draw(st.booleans()):
            name = names[index]
            return draw(st.sampled_from([name, name.upper(), name.title()]))
        return str(number)

    step = draw(st.one_of(st.integers(1, 4), st.integers(1, high - low + 1)))
    kind = draw(st.sampled_from(["*", "*/s", "n", "n", "a-b", "a-b/s", "n/s"]))
    if kind == "*":
        return "*"
    if kind == "*/s":
        return f"*/{step}"
    start = draw(numbers)
    if kind == "n":
        return token(start)
    if kind == "n/s":
        return f"{token(start)}/{step}"
    if kind == "a-b/s":  # of two values at least: cronsim misreads one (cronsim_misreads)
        end = draw(st.integers(min(start + 1, high), high))
        return f"{token(min(start, end - 1))}-{token(end)}/{step}"
    return f"{token(start)}-{token(draw(st.integers(start, high)))}"


def fields(
    low: int, high: int, *, names: tuple[str, ...] = (), first_name: int = 0, near: int = 0, star: int = 1
) -> st.SearchStrategy[str]:
    """A field: a list of 1-3 items, or `*` alone with weight `star`."""
    listed = st.lists(items(low, high, names, first_name, near), min_size=1, max_size=3).map(",".join)
    return st.one_of(*[st.just("*")] * star, listed)


VALID_FIELDS = (
    fields(0, 59, near=0),
    fields(0, 23, near=2),
    fields(1, 31, near=29, star=3),
    fields(1, 12, names=MONTH_NAMES, first_name=1, near=3, star=3),
    fields(0, 7, names=DAY_NAMES, near=0, star=3),
)
expressions = st.tuples(*VALID_FIELDS).map(" ".join)


@st.composite
def starts(draw: st.DrawFn, zone: str) -> datetime:
    """An instant in 2025-2028, half of the time within a day and a half of a DST change."""
    changes = [t for t in transitions(zone) if FIRST <= t < LAST]
    if changes and draw(st.booleans()):
        moment = draw(st.sampled_from(changes)) + timedelta(minutes=draw(st.integers(-36 * 60, 36 * 60)))
    else:
        moment = FIRST + timedelta(minutes=draw(st.integers(0, int((LAST - FIRST).total_seconds() // 60))))
    return moment + timedelta(seconds=draw(st.sampled_from([0, 0, 1, 59])))


@st.composite
def token_strings(draw: st.DrawFn) -> str:
    """A field made of cron tokens, valid or not: numbers, names, operators, other schedulers'."""
    tokens = st.sampled_from(
        [
            *("*", "/", "-", ",", "0", "1", "2", "5", "7", "12", "15", "23", "29", "30", "31", "59", "60"),
            *("mon", "SUN", "sat", "jan", "Dec", "L", "W", "LW", "5L", "15W", "#2", "?", "junk"),
        ]
    )
    return "".join(draw(st.lists(tokens, min_size=1, max_size=5)))


# -- the implementations --------------------------------------------------------------------------


def ours(expression: str, zone: str, after: datetime, count: int = FIRES) -> list[datetime]:
    cron, tz, fires = parse_cron(expression), zoneinfo.ZoneInfo(zone), []
    for _ in range(count):
        slot = next_slot(cron, tz, after)
        if slot is None:
            break
        fires.append(slot)
        after = slot
    return fires


def our_refusal(expression: str) -> str | None:
    try:
        parse_cron(expression)
    except InvalidRecurrence as refusal:
        return str(refusal)
    return None


def cronsims(expression: str, zone: str, after: datetime, count: int = FIRES) -> list[datetime]:
    """cronsim's next fires with its own DST handling, in UTC; fewer when it gives up."""
    iterator = CronSim(expression, after.astimezone(zoneinfo.ZoneInfo(zone)))
    return [fire.astimezone(UTC) for fire in itertools.islice(iterator, count)]


def cronsims_by_the_wall_clock(
    expression: str, zone: str, after: datetime
) -> tuple[list[datetime], datetime]:
    """docs/contract.md#schedules applied to the wall times cronsim matches (naive, no DST): the first
    FIRES fires after `after`, and the instant up to which they are all there is."""
    walls = CronSim(expression, after.astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None))
    fires: list[datetime] = []
    wall = after.replace(tzinfo=None)
    for wall in itertools.islice(walls, WALL_TIMES_LOOKED_AT):
        if wall.replace(tzinfo=UTC) > HORIZON:
            return fires, HORIZON - timedelta(days=1)
        instant = spec_instant(wall, zone)
        if instant > after and (not fires or instant > fires[-1]):  # times merged by a gap run once
            fires.append(instant)
            if len(fires) == FIRES:
                return fires, instant
    return fires, gave_up_after(wall)


def gave_up_after(last: datetime) -> datetime:
    """cronsim stops looking for the next fire 50 years on: up to here there is none."""
    return datetime(last.year + CRONSIM_GIVES_UP_YEARS, 1, 1, tzinfo=UTC)


def cronsim_misreads(expression: str) -> bool:
    """cronsim reads a stepped range of one value ("5-5/2", "1-mon/2") as "5/2": from 5 to the end
    of the field. Vixie and Debian cron read it as 5 alone, as we do (test_cron_grammar.py)."""
    names = {**{n: i for i, n in enumerate(DAY_NAMES)}, **{n: i + 1 for i, n in enumerate(MONTH_NAMES)}}
    for item in expression.lower().replace(",", " ").split():
        first, dash, rest = item.partition("-")
        last, slash, _ = rest.partition("/")
        if dash and slash and names.get(first, first) == names.get(last, last):
            return True
    return False


def walks_the_wall_clock(expression: str) -> bool:
    minute, hour = expression.split()[:2]
    return not minute.startswith("*") and not hour.startswith("*")


def matches_a_missing_wall_time(expression: str, missing_from: datetime, present_from: datetime) -> bool:
    candidate = next(CronSim(expression, missing_from - timedelta(seconds=1)), None)
    return candidate is not None and candidate < present_from


def second_pass_of_a_fold(instant: datetime, tz: zoneinfo.ZoneInfo) -> bool:
    local = instant.astimezone(tz)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def as_spec_reads_cronsim(
    expression: str, zone: str, after: datetime, fires: list[datetime], until: datetime
) -> list[datetime]:
    """cronsim's own fires in (after, until] with docs/contract.md#schedules's two DST rules applied."""
    if walks_the_wall_clock(expression):
        # The same rules. cronsim defect: started in a fold's second pass, it first returns the
        # fold's wall times that already ran, instants before the start.
        return [fire for fire in fires if fire > after]
    tz = zoneinfo.ZoneInfo(zone)
    kept = {fire for fire in fires if not second_pass_of_a_fold(fire, tz)}  # the fold runs once
    for instant, missing_from, present_from in gaps(zone, after, until):
        if matches_a_missing_wall_time(expression, missing_from, present_from):
            kept.add(instant)  # the gap's wall times run at its end
    return sorted(kept)


def cronsims_until(fires: list[datetime], after: datetime) -> datetime:
    """The instant up to which cronsim's fires are all there is."""
    return fires[-1] if len(fires) == FIRES else gave_up_after(fires[-1] if fires else after)


def assert_same_until(
    got: list[datetime], expected: list[datetime], until: datetime, context: object
) -> None:
    """Ours equal the expected fires up to `until`, or up to our last if we stopped earlier."""
    if len(got) == FIRES:
        until = min(until, got[-1])
    assert [fire for fire in got if fire <= until] == [fire for fire in expected if fire <= until], context


# -- the properties -------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    # Each field valid or a string of tokens, so that most expressions have one doubtful field.
    expression=st.tuples(*[st.one_of(valid, valid, token_strings()) for valid in VALID_FIELDS]).map(" ".join),
    after=starts("UTC"),
)
def test_we_accept_what_cronsim_accepts_and_fire_alike(expression, after):
    assume(not cronsim_misreads(expression))
    try:
        fires: list[datetime] | None = cronsims(expression, "UTC", after)
    except CronSimError:
        fires = None
    refusal = our_refusal(expression)
    if refusal is not None:
        # Refused by both, or an extension cronsim reads and we refuse by name.
        assert fires is None or "is not supported" in refusal, (expression, refusal)
    elif fires is None:
        assert ours(expression, "UTC", after, count=1) == [], expression  # a day no month has
    else:
        assert_same_until(ours(expression, "UTC", after), fires, cronsims_until(fires, after), expression)


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), expression=expressions, zone=st.sampled_from(ZONES))
def test_fires_are_cronsims_wall_times_run_as_spec_5_says(data, expression, zone):
    after = data.draw(starts(zone))
    try:
        expected, until = cronsims_by_the_wall_clock(expression, zone, after)
    except CronSimError:
        assert ours(expression, zone, after, count=1) == [], expression  # a day no month has
        return
    assert_same_until(ours(expression, zone, after), expected, until, (expression, zone, after))


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), expression=expressions, zone=st.sampled_from(ZONES))
def test_fires_differ_from_cronsims_own_dst_handling_only_by_the_two_rules(data, expression, zone):
    assume(zone not in OFF_THE_HOUR_CHANGES or walks_the_wall_clock(expression))
    after = data.draw(starts(zone))
    try:
        fires = cronsims(expression, zone, after)
    except CronSimError:
        assert ours(expression, zone, after, count=1) == [], expression  # a day no month has
        return
    until = cronsims_until(fires, after)
    expected = as_spec_reads_cronsim(expression, zone, after, fires, until)
    assert_same_until(ours(expression, zone, after), expected, until, (expression, zone, after))
