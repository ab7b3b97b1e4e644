"""An occurrence was skipped because it would have crossed its schedule's monthly cap: the owner is
told once per month per schedule (later skips that month are recorded on the schedule's page, not
sent). Content-free: the schedule's title, the cap and this month's spend, and a link. To the owner,
on the channels they hear pauses on (docs/contract.md#monthly-cap-per-schedule)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.urls import reverse

from accounting.formatting import local_text, money_text
from accounting.ledger import month_bounds
from accounting.money import format_money
from accounting.selectors import cost_this_month, owner_timezone
from accounting.timezones import owner_zone
from schedules.models import Notice, NotificationSettings, Occurrence
from schedules.notices.message import Message

EVENT = "schedule.monthly_cap_reached"


def queue(occurrence: Occurrence, *, owner_id: int, now: datetime) -> Notice | None:
    """In the tick's transaction, which holds the schedule's row: the month's first such skip is told."""
    zone = owner_zone(owner_timezone(owner_id))
    start, end = month_bounds(now.astimezone(zone).date(), zone)
    told = Notice.objects.filter(
        kind=Notice.Kind.MONTHLY_CAP,
        schedule_id=occurrence.schedule_id,
        created_at__gte=start,
        created_at__lt=end,
    )
    if told.exists():
        return None
    return Notice.objects.create(
        kind=Notice.Kind.MONTHLY_CAP,
        owner_id=owner_id,
        schedule_id=occurrence.schedule_id,
        occurrence=occurrence,
        created_at=now,
    )


def channels(owner: NotificationSettings) -> tuple[bool, bool]:
    """(email, webhook)."""
    return owner.email_enabled, owner.webhook_active


def message(row: Notice, owner: NotificationSettings) -> Message:
    assert row.occurrence is not None and row.schedule is not None
    schedule, occurrence = row.schedule, row.occurrence
    zone_name = owner_timezone(row.owner_id)
    zone = owner_zone(zone_name)
    cap = occurrence.revision.monthly_cap
    spent = cost_this_month(row.owner_id, [schedule.pk], zone_name, now=row.created_at).get(schedule.pk)
    link = settings.SITE_URL + reverse("schedules:detail", args=[schedule.pk])
    month = occurrence.scheduled_for.astimezone(zone)
    lines = [
        f"“{schedule.title}” skipped its run of {local_text(occurrence.scheduled_for, zone, 'full')}: "
        f"it would have crossed the schedule's monthly cap of {money_text(cap)} "
        f"({money_text(spent or 0)} spent this month).",
        "",
        f"It stays active, and runs again when {month:%B}'s spending leaves room or the month ends. "
        "Other skips this month are listed on its page and not sent again.",
        f"The schedule: {link}",
    ]
    payload = {
        "event": EVENT,
        "schedule": {"id": schedule.pk, "title": schedule.title, "url": link},
        "occurrence": {"id": occurrence.pk, "scheduled_for": occurrence.scheduled_for.isoformat()},
        "monthly_cap": format_money(cap) if cap is not None else None,
        "spent_this_month": format_money(spent or Decimal(0)),
        "test": False,
    }
    return Message(subject=f"Monthly cap reached: {schedule.title}", text="\n".join(lines), payload=payload)
