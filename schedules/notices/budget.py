"""The owner's spend crossed an alert threshold of a ceiling (accounting.alerts): one notice per
admission or charge, naming every threshold it crossed, with the level, the ceiling and a link to the
budget page. Content-free: amounts and percentages, never a prompt or an answer. To the owner, on the
channels they hear pauses on (docs/contract.md#threshold-alerts)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse

from accounting.formatting import local_text, money_text
from accounting.models import BudgetAlert
from accounting.money import format_money
from accounting.selectors import owner_timezone
from accounting.timezones import owner_zone
from schedules.models import Notice, NotificationSettings
from schedules.notices.message import Message

EVENT = "budget.threshold_crossed"
PERIOD_WORDS: dict[str, str] = {BudgetAlert.Period.DAY: "daily", BudgetAlert.Period.MONTH: "monthly"}


def queue(sender: Any, owner_id: int, alert_ids: list[int], **kwargs: Any) -> Notice:
    """Receives `thresholds_crossed`, in the transaction that recorded the alerts: one notice, which
    names the highest of them (the others were recorded in the same judgement: its `batch`)."""
    alerts = list(BudgetAlert.objects.filter(pk__in=alert_ids).order_by("-threshold", "period"))
    return Notice.objects.create(
        kind=Notice.Kind.BUDGET, owner_id=owner_id, budget_alert=alerts[0], created_at=alerts[0].created_at
    )


def channels(owner: NotificationSettings) -> tuple[bool, bool]:
    """(email, webhook)."""
    return owner.email_enabled, owner.webhook_active


def message(row: Notice, owner: NotificationSettings) -> Message:
    assert row.budget_alert is not None  # a budget notice names its alert
    alerts = list(
        BudgetAlert.objects.filter(owner_id=row.owner_id, batch=row.budget_alert.batch).order_by(
            "period", "threshold"
        )
    )
    return alert_message(alerts)


def alert_message(alerts: list[BudgetAlert]) -> Message:
    zone = owner_zone(owner_timezone(alerts[0].owner_id))
    link = settings.SITE_URL + reverse("accounting:budget")
    sentences = [
        f"You have reached {a.threshold} % of your {PERIOD_WORDS[a.period]} budget: "
        f"{money_text(a.level)} of {money_text(a.ceiling)} spent or reserved by runs in flight."
        for a in alerts
    ]
    highest = max(alerts, key=lambda a: (a.threshold, a.period == BudgetAlert.Period.MONTH))
    lines = [
        *sentences,
        "",
        f"Judged at {local_text(highest.created_at, zone, 'full')}. A run that would cross a ceiling is "
        "not admitted; raising a ceiling is an admin's decision.",
        f"See what is spent and what is coming: {link}",
        f"Choose your thresholds: {settings.SITE_URL + reverse('schedules:settings')}",
    ]
    payload = {
        "event": EVENT,
        "crossed": [
            {
                "period": a.period,
                "period_start": a.period_start.isoformat(),
                "threshold": a.threshold,
                "level": format_money(a.level),
                "ceiling": format_money(a.ceiling),
                "at": a.created_at.isoformat(),
            }
            for a in alerts
        ],
        "url": link,
        "test": False,
    }
    subject = f"Budget: {highest.threshold} % of your {PERIOD_WORDS[highest.period]} budget reached"
    return Message(subject=subject, text="\n".join(lines), payload=payload)
