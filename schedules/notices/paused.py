"""A schedule paused itself (its failure limit, or a definition that cannot run): the owner is told
once, content-free like `schedule.run_accounted`: the title, when and why in one sentence, the
classification of the failed runs that tripped it, the count and the limit, and a link. Never a
prompt, an answer or a provider message. To the owner, on the channels they hear pauses on. The
same pause told within a day is not told again (`_told_within_a_day`)."""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from accounting.models import AccountingEvent
from accounting.selectors import owner_timezone
from runs.failures import Failure
from schedules import words
from schedules.models import Notice, NotificationSettings, PauseEvent
from schedules.notices.message import Message

# Identical pause notices of one schedule within this window fold into the first (SPEC 12).
FOLD_WINDOW = timedelta(hours=24)


def queue(event: PauseEvent) -> Notice | None:
    """In the pause's transaction: the notice of a pause the schedule made itself, unless the same
    pause was told within the last day (None then)."""
    if not event.needs_notice or _told_within_a_day(event):
        return None
    return Notice.objects.create(
        kind=Notice.Kind.PAUSED,
        owner_id=event.schedule.owner_id,
        schedule_id=event.schedule_id,
        pause_event=event,
        created_at=event.created_at,
    )


def _told_within_a_day(event: PauseEvent) -> bool:
    """Whether a paused notice of this schedule written in the FOLD_WINDOW before `event` told the
    same thing: the same reason and detail, tripped by failures of the same classification. An owner
    who resumes a broken schedule twice a day should not get the same email twice; a different
    reason or failure is news and tells. Only rows that told count, so the window is not stretched
    by the folded ones. The caller holds the schedule's lock, so two pauses cannot both miss."""
    earlier = list(
        PauseEvent.objects.filter(
            schedule_id=event.schedule_id,
            reason=event.reason,
            detail=event.detail,
            notices__kind=Notice.Kind.PAUSED,
            notices__created_at__gte=event.created_at - FOLD_WINDOW,
            notices__created_at__lte=event.created_at,
        )
        .exclude(pk=event.pk)
        .distinct()
    )
    if not earlier:
        return False
    classification = _tripping_classification(event)
    return any(_tripping_classification(told) == classification for told in earlier)


def _tripping_classification(event: PauseEvent) -> tuple[str, str] | None:
    """(reason, error_class) of the newest failed `schedule.run_accounted` up to the pause, read
    like `pause_notice` reads the failures it names; None when no run failed (a definition pause)."""
    accounted = (
        AccountingEvent.objects.filter(
            schedule_id=event.schedule_id,
            event=AccountingEvent.Kind.RUN_ACCOUNTED,
            created_at__lte=event.created_at,
            payload__failure__isnull=False,
        )
        .exclude(payload__failure=None)
        .order_by("-created_at", "-id")
        .values_list("payload__failure", flat=True)
        .first()
    )
    if not accounted:
        return None
    return str(accounted.get("reason", "")), str(accounted.get("error_class", ""))


def channels(owner: NotificationSettings) -> tuple[bool, bool]:
    """(email, webhook)."""
    return owner.email_enabled, owner.webhook_active


def message(row: Notice, owner: NotificationSettings) -> Message:
    assert row.pause_event is not None
    return pause_notice(row.pause_event)


def pause_notice(event: PauseEvent) -> Message:
    """The content-free message for a pause: built only from the pause record and the
    schedule's accounting events, which carry no prompt, answer or provider message."""
    schedule = event.schedule
    tz = owner_timezone(schedule.owner_id)
    accounted = list(
        AccountingEvent.objects.filter(schedule_id=schedule.pk, created_at__lte=event.created_at).order_by(
            "-created_at", "-id"
        )[: max(event.failures_at_event, 1)]
    )
    sentence = words.pause_explanation(schedule, event, accounted, {}, tz)
    tripped = [e for e in accounted if e.failure][: event.failures_at_event]
    failures = [
        {"run_id": e.run_id, "scheduled_for": e.payload.get("scheduled_for"), **(e.failure or {})}
        for e in reversed(tripped)
    ]
    link = settings.SITE_URL + reverse("schedules:detail", args=[schedule.pk])
    lines = [sentence, "", f"Failures counted: {event.failures_at_event} of {event.failure_limit}."]
    zone = zoneinfo.ZoneInfo(tz)
    for accounted_event in reversed(tripped):
        failure = Failure.from_payload(accounted_event.failure)
        when = datetime.fromisoformat(accounted_event.payload["scheduled_for"]).astimezone(zone)
        classification = failure.long if failure else ""
        lines.append(f"- {when:%-d %b %H:%M} {when.tzname()}, run {accounted_event.run_id}: {classification}")
    lines += [
        "",
        "Resuming keeps the count: until a run completes, the next failure pauses it again.",
        f"Open: {link}",
    ]
    payload = {
        "event": "schedule.paused",
        "schedule": {"id": schedule.pk, "title": schedule.title, "url": link},
        "paused_at": event.created_at.isoformat(),
        "reason": event.reason,
        "summary": sentence,
        "detail": event.detail,
        "consecutive_failures": event.failures_at_event,
        "max_consecutive_failures": event.failure_limit,
        "failures": failures,
        "test": False,
    }
    return Message(subject=f"Paused: {schedule.title}", text="\n".join(lines), payload=payload)


def test_notice(owner_id: int) -> Message:
    link = settings.SITE_URL + reverse("schedules:list")
    payload = {
        "event": "schedule.paused",
        "schedule": {"id": None, "title": "Test notification", "url": link},
        "paused_at": timezone.now().isoformat(),
        "reason": "test",
        "summary": "This is a test: your notifications reach you. No schedule was paused.",
        "detail": "",
        "consecutive_failures": 0,
        "max_consecutive_failures": 0,
        "failures": [],
        "test": True,
    }
    return Message(subject="Test notification", text=f"{payload['summary']}\n\nOpen: {link}", payload=payload)
