"""Formatting for the dashboard: money with units, times in the owner's zone, status badges."""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from runs.limits import format_money

register = template.Library()

CENT = Decimal("0.01")
TINY = Decimal("0.0001")

# Status words and the tone that colours them; the word is always shown (never colour alone).
TONES: dict[str, str] = {
    "active": "ok",
    "completed": "ok",
    "paused": "warn",
    "failed": "bad",
    "running": "info",
    "queued": "info",
    "pending": "info",
    "missed": "muted",
    "skipped": "muted",
    "cancelled": "muted",
    "delivered": "ok",
    "retrying": "warn",
}
PAUSE_WORDS: dict[str, str] = {
    "failure_limit": "failure limit",
    "owner": "by owner",
    "admin": "by admin",
    "invalid_definition": "invalid definition",
}


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


@register.filter
def money(value: Any) -> str:
    return money_text(value)


@register.filter
def money_exact(value: Any) -> str:
    return money_text(value, exact=True)


@register.filter
def pct(part: Any, whole: Any) -> str:
    """`part` as a percentage of `whole`, clamped to 0-100, for a bar's width."""
    numerator, denominator = as_decimal(part), as_decimal(whole)
    if numerator is None or denominator is None or denominator <= 0:
        return "0%"
    share = max(Decimal(0), min(Decimal(100), numerator * 100 / denominator))
    return f"{share.quantize(Decimal('0.1'))}%"


def zone_of(context: template.Context | dict[str, Any]) -> zoneinfo.ZoneInfo:
    name = context.get("owner_tz")
    if not name:
        budget = context.get("budget")
        name = getattr(budget, "timezone", None)
    try:
        return zoneinfo.ZoneInfo(str(name or "UTC"))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zoneinfo.ZoneInfo("UTC")


def local_text(moment: datetime, zone: zoneinfo.ZoneInfo, style: str = "short") -> str:
    local = moment.astimezone(zone)
    abbreviation = local.tzname() or zone.key
    if style == "day":
        return f"{local.day} {local:%b}"
    if style == "time":
        return f"{local:%H:%M} {abbreviation}"
    this_year = timezone.now().astimezone(zone).year == local.year
    date = f"{local.day} {local:%b}" if style == "short" and this_year else f"{local.day} {local:%b %Y}"
    return f"{date}, {local:%H:%M} {abbreviation}"


@register.simple_tag(takes_context=True)
def local(context: template.Context, moment: datetime | None, style: str = "short") -> SafeString | str:
    """A time in the owner's zone, abbreviation shown and the full zone in the tooltip."""
    if moment is None:
        return "—"
    zone = zone_of(context)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat(),
        zone.key,
        local_text(moment, zone, style),
    )


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


@register.filter
def relative(moment: datetime | None) -> str:
    return relative_text(moment) if moment else ""


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


@register.simple_tag
def duration(start: datetime | None, end: datetime | None) -> str:
    return duration_text(start, end)


@register.simple_tag
def badge(status: str, detail: str = "") -> SafeString:
    """A status in words and colour: `{% badge "paused" "failure limit" %}`. The word is always
    there; the colour and the dot's shape only repeat it."""
    word = status.replace("_", " ").capitalize()
    tone = TONES.get(status, "muted")
    if detail:
        return format_html(
            '<span class="badge badge--{}"><span class="badge__dot" aria-hidden="true"></span>{}'
            '<span class="badge__detail"> · {}</span></span>',
            tone,
            word,
            detail,
        )
    return format_html(
        '<span class="badge badge--{}"><span class="badge__dot" aria-hidden="true"></span>{}</span>',
        tone,
        word,
    )


@register.filter
def pause_words(reason: str) -> str:
    return PAUSE_WORDS.get(reason, reason.replace("_", " "))


@register.filter
def plural(count: int, words: str) -> str:
    """`{{ n|plural:"run,runs" }}` -> "1 run" / "3 runs"."""
    singular, _, many = words.partition(",")
    return f"{count} {singular if count == 1 else (many or singular + 's')}"


@register.filter
def words(value: str) -> str:
    """An identifier in words: "model_calls" -> "model calls"."""
    return str(value).replace("_", " ")


@register.filter
def lookup(mapping: Any, key: Any) -> Any:
    """`{{ names|lookup:segment.key }}`: a dict value in a template."""
    try:
        return mapping[key]
    except (KeyError, TypeError, IndexError):
        return ""


@register.filter
def amount(value: Any) -> str:
    """A bare USD amount for chart axes: at least cents, more places only when needed."""
    number = as_decimal(value)
    if number is None:
        return ""
    return format_money(number)
