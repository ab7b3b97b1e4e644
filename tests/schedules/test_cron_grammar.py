"""docs/contract.md#schedules's cron grammar as one table: Vixie five-field cron as Debian cron and
cronsim read it. Accepted expressions with their first fires (checked against cronsim by hand and, at
random, by test_cron_differential.py), and refused ones with the reason the owner is shown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schedules.recurrence import InvalidRecurrence, next_slot, parse_cron, parse_timezone, validate

UTC_ZONE = parse_timezone("UTC")
NEW_YEAR_2025 = datetime(2025, 1, 1, tzinfo=UTC)  # a Wednesday


def first_fires(expression: str, after: datetime = NEW_YEAR_2025, count: int = 3) -> list[str]:
    cron = parse_cron(expression)
    fires: list[str] = []
    for _ in range(count):
        slot = next_slot(cron, UTC_ZONE, after)
        assert slot is not None
        fires.append(slot.strftime("%Y-%m-%d %a %H:%M"))
        after = slot
    return fires


ACCEPTED = [
    # A day field that starts with "*" is unrestricted, so the other one alone decides (AND).
    ("0 0 */2 * 1", ["2025-01-13 Mon 00:00", "2025-01-27 Mon 00:00", "2025-02-03 Mon 00:00"]),
    ("0 9 */2 * 1-5", ["2025-01-01 Wed 09:00", "2025-01-03 Fri 09:00", "2025-01-07 Tue 09:00"]),
    ("0 0 *,5 * 1", ["2025-01-06 Mon 00:00", "2025-01-13 Mon 00:00", "2025-01-20 Mon 00:00"]),
    ("0 0 29 2 */7", ["2032-02-29 Sun 00:00", "2060-02-29 Sun 00:00", "2088-02-29 Sun 00:00"]),
    # Both restricted: either one (OR).
    ("0 0 1 * mon", ["2025-01-06 Mon 00:00", "2025-01-13 Mon 00:00", "2025-01-20 Mon 00:00"]),
    ("0 0 13 * 5", ["2025-01-03 Fri 00:00", "2025-01-10 Fri 00:00", "2025-01-13 Mon 00:00"]),
    # 0 and 7 are both Sunday, also at the start of a range or step.
    ("0 0 * * 7", ["2025-01-05 Sun 00:00", "2025-01-12 Sun 00:00", "2025-01-19 Sun 00:00"]),
    ("0 0 * * 7-7", ["2025-01-05 Sun 00:00", "2025-01-12 Sun 00:00", "2025-01-19 Sun 00:00"]),
    ("0 0 * * 5-7", ["2025-01-03 Fri 00:00", "2025-01-04 Sat 00:00", "2025-01-05 Sun 00:00"]),
    ("0 0 * * 1/2", ["2025-01-03 Fri 00:00", "2025-01-05 Sun 00:00", "2025-01-06 Mon 00:00"]),
    ("0 0 * * 0,7", ["2025-01-05 Sun 00:00", "2025-01-12 Sun 00:00", "2025-01-19 Sun 00:00"]),
    # Names: whole three-letter tokens, any case, in lists and ranges.
    ("0 0 1 jan,JUL *", ["2025-07-01 Tue 00:00", "2026-01-01 Thu 00:00", "2026-07-01 Wed 00:00"]),
    ("0 12 * * MON-FRI", ["2025-01-01 Wed 12:00", "2025-01-02 Thu 12:00", "2025-01-03 Fri 12:00"]),
    ("0 */6 * * sat,sun", ["2025-01-04 Sat 00:00", "2025-01-04 Sat 06:00", "2025-01-04 Sat 12:00"]),
    # Steps from a number run to the end of the field.
    ("5/15 * * * *", ["2025-01-01 Wed 00:05", "2025-01-01 Wed 00:20", "2025-01-01 Wed 00:35"]),
    ("0 0 1-31/10 * *", ["2025-01-11 Sat 00:00", "2025-01-21 Tue 00:00", "2025-01-31 Fri 00:00"]),
    # A stepped range of one value is that value, as Vixie cron reads it (cronsim reads "5/10").
    ("5-5/10 * * * *", ["2025-01-01 Wed 00:05", "2025-01-01 Wed 01:05", "2025-01-01 Wed 02:05"]),
    ("59 23 31 dec *", ["2025-12-31 Wed 23:59", "2026-12-31 Thu 23:59", "2027-12-31 Fri 23:59"]),
    ("0\t9  * *  *", ["2025-01-01 Wed 09:00", "2025-01-02 Thu 09:00", "2025-01-03 Fri 09:00"]),
    # Plain forms.
    ("weekdays at 7:30", ["2025-01-01 Wed 07:30", "2025-01-02 Thu 07:30", "2025-01-03 Fri 07:30"]),
    ("every sunday at 18:00", ["2025-01-05 Sun 18:00", "2025-01-12 Sun 18:00", "2025-01-19 Sun 18:00"]),
]


@pytest.mark.parametrize(("expression", "fires"), ACCEPTED, ids=[row[0] for row in ACCEPTED])
def test_an_accepted_expression_fires_as_vixie_cron_reads_it(expression, fires):
    assert first_fires(expression) == fires


REFUSED = [
    ("0 0 * * 7-1", "cron day of week range '7-1' runs backwards"),
    ("*/ * * * *", "cron minute field has '*/', whose step is empty"),
    ("0 5/ * * *", "cron hour field has '5/', whose step is empty"),
    ("0 0 1-5/ * *", "cron day of month field has '1-5/', whose step is empty"),
    ("*/0 * * * *", "cron minute step must be a positive number, not '0'"),
    ("0 0 * junk *", "cron month field has 'junk', which is not a number or a month name (jan-dec)"),
    ("0 0 * mayday *", "cron month field has 'mayday', which is not a number or a month name"),
    ("0 0 * * sunny", "cron day of week field has 'sunny', which is not a number or a day name (sun-sat)"),
    ("0 0 * * jan", "cron day of week field has 'jan', which is not a number or a day name"),
    ("0 0 ² * *", "'²' is not a digit cron reads: write numbers with 0-9"),
    ("0 ٣ * * *", "'٣' is not a digit cron reads"),
    ("\uff13 0 * * *", "'\uff13' is not a digit cron reads"),  # full-width 3
    ("daily at \u0660\u0669:\u0660\u0660", "'\u0660' is not a digit cron reads"),  # Arabic-Indic 09:00
    ("0 0 * * €", "cron day of week field has '€', which is not part of cron"),
    ("0 0 L * *", "'L' (the last day or weekday of the month) is not supported"),
    ("0 0 * * 5L", "cron day of week field has '5L': 'L'"),
    ("0 0 LW * *", "'LW' (the last weekday of the month) is not supported"),
    ("0 0 15W * *", "cron day of month field has '15W': 'W' (the weekday nearest a day) is not supported"),
    ("0 0 * * 1#2", "cron day of week field has '1#2': '#' (the nth weekday of the month) is not supported"),
    ("0 0 ? * mon", "'?' is not supported; write '*'"),
    ("0 0 9 * * *", "not 6 (a seconds field is not supported)"),
    ("0 9 * *", "cron needs five fields (minute hour day month weekday), not 4"),
    ("@reboot", "@reboot is not supported: a schedule runs at set times"),
    ("@daily", "@daily is not supported: write it as '0 0 * * *'"),
    ("@weekly", "@weekly is not supported: write it as '0 0 * * 0'"),
    ("@every 5m", "'@every' is not supported: write five fields"),
    ("60 * * * *", "cron minute must be between 0 and 59, not 60"),
    ("0 24 * * *", "cron hour must be between 0 and 23, not 24"),
    ("0 0 0 * *", "cron day of month must be between 1 and 31, not 0"),
    ("0 0 * 13 *", "cron month must be between 1 and 12, not 13"),
    ("0 0 * * 8", "cron day of week must be between 0 and 7, not 8"),
    ("-5 * * * *", "cron minute field has '-5', which is missing a number"),
    ("1,,2 * * * *", "cron minute field has an empty list item"),
    ("*-5 * * * *", "cron minute field has '*', which is not a number"),
    ("every funday at 09:00", "'funday' is not a day of the week"),
    ("daily at 25:00", "25:00 is not a time of day"),
]


@pytest.mark.parametrize(("expression", "reason"), REFUSED, ids=[row[0] for row in REFUSED])
def test_a_refused_expression_says_why(expression, reason):
    with pytest.raises(InvalidRecurrence) as refused:
        parse_cron(expression)

    assert reason in str(refused.value)


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 2,4,6,9,11 *", "0 0 30,31 feb *"])
def test_an_expression_that_never_fires_is_refused(expression):
    with pytest.raises(InvalidRecurrence, match="never fires"):
        validate(expression, "Europe/Riga", now=NEW_YEAR_2025)


def test_feb_29_across_2100_is_eight_years_away_not_dead():
    # 2100 is not a leap year; the next Feb 29 after 2096 is in 2104.
    assert first_fires("0 0 29 2 *", after=datetime(2096, 3, 1, tzinfo=UTC), count=1) == [
        "2104-02-29 Fri 00:00"
    ]
    assert validate("0 0 29 2 *", "UTC", now=datetime(2096, 3, 1, tzinfo=UTC)) == "0 0 29 2 *"


def test_feb_29_on_a_sunday_across_2100_is_forty_years_away_not_dead():
    assert first_fires("0 0 29 2 */7", after=datetime(2088, 3, 1, tzinfo=UTC), count=1) == [
        "2128-02-29 Sun 00:00"
    ]
