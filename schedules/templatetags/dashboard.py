"""Formatting for the dashboard: money with units, times in the owner's zone, status badges."""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from accounting.formatting import as_decimal, duration_text, local_text, money_text, relative_text
from accounting.money import format_money
from accounting.timezones import owner_zone
from schedules.models import PauseEvent

register = template.Library()

# Status words and the tone that colours them; the word is always shown (never colour alone).
TONES: dict[str, str] = {
    "active": "ok",
    "completed": "ok",
    "paused": "warn",
    "failed": "bad",
    "running": "info",
    "queued": "info",
    "in_progress": "info",
    "pending": "info",
    "missed": "muted",
    "skipped": "muted",
    "cancelled": "muted",
    "delivered": "ok",
    "retrying": "warn",
    "late": "warn",
    # revision requests, and what proposed limits would have done to a recorded run
    "open": "info",
    "pinned": "ok",
    "declined": "bad",
    # schedules the assistant proposed in chat
    "confirmed": "ok",
    "expired": "muted",
}


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
    """The zone the page's view chose (accounting.selectors.owner_timezone)."""
    name = context.get("owner_tz") or getattr(context.get("budget"), "timezone", None)
    return owner_zone(str(name or ""))


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


@register.filter
def relative(moment: datetime | None) -> str:
    return relative_text(moment) if moment else ""


@register.simple_tag
def duration(start: datetime | None, end: datetime | None) -> str:
    return duration_text(start, end)


@register.simple_tag
def badge(status: str, detail: str = "", tone: str = "") -> SafeString:
    """A status in words and colour: `{% badge "paused" "failure limit" %}`. The word is always
    there; the colour and the dot's shape only repeat it. `tone` overrides the status's own
    (an active schedule whose failure count was kept reads as a warning)."""
    word = status.replace("_", " ").capitalize()
    tone = tone or TONES.get(status, "muted")
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


@register.simple_block_tag
def table(content: SafeString, caption: str, kind: str = "cards", scrolls: bool = False) -> SafeString:
    """A page's table in the wrapper that lets it scroll on a narrow screen, with its caption for
    screen readers: `{% table "Caption" %}<thead>…</thead><tbody>…</tbody>{% endtable %}`. `kind` is
    its style (app.css: .table--cards, --compact, --stack); a wide table that `scrolls` sideways takes
    the keyboard focus, so that it can be scrolled without a mouse."""
    return format_html(
        '<div class="table-wrap"{}>\n<table class="table table--{}">\n'
        '<caption class="visually-hidden">{}</caption>{}</table>\n</div>',
        SafeString(' tabindex="0"') if scrolls else "",
        kind,
        caption,
        content,
    )


@register.filter
def pause_words(reason: str) -> str:
    try:
        return str(PauseEvent.Reason(reason).label)
    except ValueError:
        return reason.replace("_", " ")


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


@register.filter
def minutes(value: timedelta) -> str:
    """A timedelta as "15 minutes" (at least one)."""
    count = max(1, round(value.total_seconds() / 60))
    return f"{count} minute{'s' if count != 1 else ''}"
