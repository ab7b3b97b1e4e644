"""Numbers and times in words, as every page, selector, notification and the admin show them:
money with its unit, times in the owner's zone with the zone's abbreviation, durations.

A plain module (no template machinery), so selectors and notifications use the same words as
the template filters in schedules/templatetags/dashboard.py, which only wrap these.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django.utils import timezone

CENT = Decimal("0.01")
TINY = Decimal("0.0001")


def as_decimal(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        return None


def money_text(value: Any, *, exact: bool = False) -> str:
    """USD with cents. A non-zero amount that would round to zero reads "< USD 0.01", or with
    `exact` keeps four places (a single run's cost)."""
    amount = as_decimal(value)
    if amount is None:
        return "—"
    if amount != 0 and abs(amount) < CENT / 2:
        return f"USD {amount.quantize(TINY, ROUND_HALF_UP).normalize():f}" if exact else "< USD 0.01"
    if exact and amount != 0 and abs(amount) < 1 and amount != amount.quantize(CENT):
        return f"USD {amount.quantize(TINY, ROUND_HALF_UP).normalize():f}"
    return f"USD {amount.quantize(CENT, ROUND_HALF_UP):,.2f}"


def local_text(moment: datetime, zone: zoneinfo.ZoneInfo, style: str = "short") -> str:
    """ "3 Sep, 09:00 EEST" (this year), "3 Sep 2025, 09:00 EEST", "3 Sep" (`day`), "09:00 EEST" (`time`)."""
    local = moment.astimezone(zone)
    abbreviation = local.tzname() or zone.key
    if style == "day":
        return f"{local.day} {local:%b}"
    if style == "time":
        return f"{local:%H:%M} {abbreviation}"
    this_year = timezone.now().astimezone(zone).year == local.year
    date = f"{local.day} {local:%b}" if style == "short" and this_year else f"{local.day} {local:%b %Y}"
    return f"{date}, {local:%H:%M} {abbreviation}"


def relative_text(moment: datetime, now: datetime | None = None) -> str:
    seconds = int((moment - (now or timezone.now())).total_seconds())
    future, seconds = seconds > 0, abs(seconds)
    if seconds < 60:
        return "in under a minute" if future else "just now"
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "min")):
        if seconds >= size:
            amount = f"{seconds // size} {unit}"
            return f"in {amount}" if future else f"{amount} ago"
    return ""  # unreachable: seconds >= 60 here


def duration_text(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "—"
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
