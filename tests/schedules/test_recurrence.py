"""Next slots in the schedule's time zone across DST, nonexistent and ambiguous times, month ends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schedules.recurrence import (
    InvalidRecurrence,
    describe,
    next_slot,
    normalize,
    parse_cron,
    parse_timezone,
    slots_between,
)

RIGA = parse_timezone("Europe/Riga")
NEW_YORK = parse_timezone("America/New_York")


def local_times(cron: str, zone, start: datetime, end: datetime) -> list[str]:
    return [
        s.astimezone(zone).strftime("%m-%d %H:%M %Z")
        for s in slots_between(parse_cron(cron), zone, start, end)
    ]


@pytest.mark.parametrize(
    ("zone", "start", "end"),
    [
        (RIGA, datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC)),  # spring forward 29 Mar
        (RIGA, datetime(2026, 10, 22, tzinfo=UTC), datetime(2026, 10, 28, tzinfo=UTC)),  # fall back 25 Oct
        (NEW_YORK, datetime(2026, 3, 6, tzinfo=UTC), datetime(2026, 3, 11, tzinfo=UTC)),  # 8 Mar
        (NEW_YORK, datetime(2026, 10, 30, tzinfo=UTC), datetime(2026, 11, 4, tzinfo=UTC)),  # 1 Nov
    ],
)
def test_a_0900_schedule_runs_at_0900_local_on_both_sides_of_a_dst_change(zone, start, end):
    slots = local_times("0 9 * * *", zone, start, end)
    assert len(slots) == (end - start).days
    assert all(" 09:00 " in slot for slot in slots)


def test_a_nonexistent_local_time_moves_forward_to_the_end_of_the_gap():
    # Riga skips 03:00-04:00 on 29 Mar 2026; 03:30 runs at 04:00 EEST.
    slots = local_times(
        "30 3 * * *", RIGA, datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC)
    )
    assert slots == ["03-28 03:30 EET", "03-29 04:00 EEST", "03-30 03:30 EEST"]
    # New York skips 02:00-03:00 on 8 Mar 2026.
    slots = local_times(
        "30 2 * * *", NEW_YORK, datetime(2026, 3, 7, 12, tzinfo=UTC), datetime(2026, 3, 9, 12, tzinfo=UTC)
    )
    assert slots == ["03-08 03:00 EDT", "03-09 02:30 EDT"]


def test_an_ambiguous_local_time_runs_once_at_its_first_occurrence():
    # Riga repeats 03:00-04:00 on 25 Oct 2026; New York repeats 01:00-02:00 on 1 Nov 2026.
    slots = local_times(
        "30 3 * * *", RIGA, datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, tzinfo=UTC)
    )
    assert slots == ["10-25 03:30 EEST"]
    slots = local_times(
        "30 1 * * *", NEW_YORK, datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
    )
    assert slots == ["11-01 01:30 EDT"]


def test_every_half_hour_across_the_fall_back_hour_has_no_duplicate_instants():
    start, end = datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 1, 8, tzinfo=UTC)
    slots = slots_between(parse_cron("*/30 * * * *"), NEW_YORK, start, end)
    assert len(slots) == len(set(slots))
    assert [s.astimezone(NEW_YORK).strftime("%H:%M %Z") for s in slots] == [
        "00:30 EDT",
        "01:00 EDT",
        "01:30 EDT",
        "02:00 EST",
        "02:30 EST",
        "03:00 EST",
    ]


def test_month_ends_skip_short_months():
    slots = local_times(
        "0 12 31 * *", RIGA, datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 8, 1, tzinfo=UTC)
    )
    assert [s[:5] for s in slots] == ["01-31", "03-31", "05-31", "07-31"]
    leap = local_times(
        "0 12 29 2 *", RIGA, datetime(2026, 1, 1, tzinfo=UTC), datetime(2029, 1, 1, tzinfo=UTC)
    )
    assert leap == ["02-29 12:00 EET"]


def test_day_of_month_or_day_of_week_when_both_are_restricted():
    slots = local_times(
        "0 9 1 * mon", RIGA, datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 16, tzinfo=UTC)
    )
    assert [s[:5] for s in slots] == ["06-01", "06-08", "06-15"]


def test_a_slot_is_strictly_after_the_given_instant():
    at_nine = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)  # 09:00 Riga
    assert next_slot(parse_cron("0 9 * * *"), RIGA, at_nine) == datetime(2026, 6, 2, 6, 0, tzinfo=UTC)


def test_a_cron_that_never_fires_has_no_next_slot():
    assert next_slot(parse_cron("0 0 30 2 *"), RIGA, datetime(2026, 1, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize(
    ("text", "cron"),
    [
        ("daily at 09:00", "0 9 * * *"),
        ("Every day at 7:05", "5 7 * * *"),
        ("weekdays at 08:30", "30 8 * * 1-5"),
        ("every monday at 18:00", "0 18 * * 1"),
        ("hourly", "0 * * * *"),
        ("every 15 minutes", "*/15 * * * *"),
        ("0  9 * * *", "0 9 * * *"),
    ],
)
def test_plain_forms_become_cron(text, cron):
    assert normalize(text) == cron


@pytest.mark.parametrize(
    "text",
    [
        "",
        "daily at 25:00",
        "every funday at 09:00",
        "0 9 * *",
        "0 9 * * 8",
        "*/0 * * * *",
        "5-1 * * * *",
        "a b c d e",
    ],
)
def test_bad_recurrences_are_refused_with_a_reason(text):
    with pytest.raises(InvalidRecurrence):
        parse_cron(text)


def test_cadence_in_words():
    assert describe("0 9 * * *", "Europe/Riga") == "Every day at 09:00, Europe/Riga"
    assert describe("30 8 * * 1-5", "UTC") == "Weekdays at 08:30, UTC"
    assert describe("0 18 * * 1", "UTC") == "Every Monday at 18:00, UTC"
    assert describe("*/15 * * * *", "UTC") == "Every 15 minutes, UTC"
    assert describe("*/1 * * * *", "UTC") == "Every minute, UTC"
    # Not an even spacing through the hour, or not a plain step: the expression itself.
    assert describe("*/7 * * * *", "UTC") == "Cron */7 * * * *, UTC"
    assert describe("*/5,10 * * * *", "UTC") == "Cron */5,10 * * * *, UTC"
    assert describe("5 4 1,15 * *", "UTC") == "Cron 5 4 1,15 * *, UTC"
