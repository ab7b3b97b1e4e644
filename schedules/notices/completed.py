"""A scheduled run completed, and its owner asked to hear about it: the answer in the email's body
with a link; the signed webhook names the schedule and run and carries the answer only with the
owner's content opt-in. Off by default: the owner turns it on per channel, and any schedule may
override that (always, or never, tell). The owner may also ask to hear only when the answer changed
from the schedule's previous completed run: the override says whether, the setting how often."""

from __future__ import annotations

import json
import zoneinfo
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.urls import reverse
from django.utils import timezone

from accounting.money import format_money
from accounting.selectors import owner_timezone
from runs.models import Run
from schedules.models import Notice, NotificationSettings, Occurrence, Schedule
from schedules.notices.channels import settings_for
from schedules.notices.message import Message

EVENT = "schedule.run_completed"


ANSWER_CHARS = 20_000  # an email body is not a transcript


# -- settings -------------------------------------------------------------------------------------


def update_completion_settings(
    owner: AbstractBaseUser,
    *,
    completion_email: bool,
    completion_webhook: bool,
    webhook_content: bool,
    completion_only_changed: bool = False,
) -> NotificationSettings:
    """Save the owner's completion-notice channels, the webhook content opt-in and whether only a
    changed answer is told: the whole set, as the settings form posts it. Idempotent."""
    assert owner.pk is not None
    channels = settings_for(int(owner.pk))
    NotificationSettings.objects.filter(pk=channels.pk).update(
        completion_email=completion_email,
        completion_webhook=completion_webhook,
        webhook_content=webhook_content,
        completion_only_changed=completion_only_changed,
        updated_at=timezone.now(),
    )
    channels.refresh_from_db()
    return channels


def set_schedule_completion_notices(schedule: Schedule, value: bool | None) -> Schedule:
    """A schedule's override: True (always tell), False (never), None (follow the owner)."""
    Schedule.objects.filter(pk=schedule.pk).update(completion_notices=value)
    schedule.completion_notices = value
    return schedule


def wanted(override: bool | None, channels: NotificationSettings | None) -> bool:
    if override is not None:
        return override
    return channels is not None and (channels.completion_email or channels.completion_webhook)


@dataclass(frozen=True)
class CompletionSetting:
    """A schedule's completion notices, for its page: the override and what happens, in words."""

    choice: str  # "", "on" or "off"
    sentence: str


def describe(schedule: Schedule) -> CompletionSetting:
    """In words, from the schedule alone (the page reads no more rows for it)."""
    if schedule.completion_notices is None:
        return CompletionSetting("", "Follows your settings: off unless you turned completion notices on.")
    if schedule.completion_notices:
        return CompletionSetting(
            "on",
            "You are told each time one of its runs completes. If your settings say only when the "
            "answer changed, a run that repeats the previous answer is not told.",
        )
    return CompletionSetting("off", "You are never told when its runs complete.")


# -- the notice -----------------------------------------------------------------------------------


def queue(run: Run, *, now: datetime | None = None) -> Notice | None:
    """Called inside the transaction that writes the run's terminal state (runs.signals): the
    notice, if the run is a scheduled occurrence's, completed, and its owner wants to know."""
    if run.status != Run.Status.COMPLETED or run.kind != Run.Kind.INTERACTIVE:
        return None
    occurrence = (
        Occurrence.objects.filter(run_id=run.pk)
        .values("pk", "schedule_id", "schedule__completion_notices")
        .first()
    )
    if occurrence is None:
        return None
    owner = NotificationSettings.objects.filter(owner_id=run.owner_id).first()
    if not wanted(occurrence["schedule__completion_notices"], owner):
        return None
    if (
        owner is not None
        and owner.completion_only_changed
        and _repeats_previous_answer(
            run, schedule_id=occurrence["schedule_id"], occurrence_id=occurrence["pk"]
        )
    ):
        return None
    return Notice.objects.create(
        kind=Notice.Kind.COMPLETED,
        owner_id=run.owner_id,
        schedule_id=occurrence["schedule_id"],
        occurrence_id=occurrence["pk"],
        run_id=run.pk,
        created_at=now or timezone.now(),
    )


def _repeats_previous_answer(run: Run, *, schedule_id: int, occurrence_id: int) -> bool:
    """Whether the run's answer is the schedule's previous completed run's, after stripping the
    whitespace around both: an owner who asked to hear only of changes has read that one already.
    The previous run is that of the newest other occurrence with a completed run, read down the
    schedule's newest-first index (a schedule with years of runs reads a few rows, not all of them).
    A schedule's first completed run has none and always tells."""
    previous = (
        Occurrence.objects.filter(schedule_id=schedule_id, run__status=Run.Status.COMPLETED)
        .exclude(pk=occurrence_id)
        .order_by("-scheduled_for", "-id")
        .values_list("run__answer", flat=True)
        .first()
    )
    return previous is not None and previous.strip() == run.answer.strip()


def channels(owner: NotificationSettings) -> tuple[bool, bool]:
    """(email, webhook) a completion notice goes to. A schedule set to "always tell" while no
    completion channel is chosen uses the channels the owner hears pauses on."""
    if owner.completion_email or owner.completion_webhook:
        return owner.completion_email, owner.completion_webhook and owner.webhook_active
    return owner.email_enabled, owner.webhook_active


def message(row: Notice, owner: NotificationSettings) -> Message:
    return completion_message(row, include_answer=owner.webhook_content)


def completion_message(row: Notice, *, include_answer: bool) -> Message:
    """Email text with the answer and a link; the webhook payload names the schedule and run and
    carries the answer only with the owner's content opt-in (`include_answer`)."""
    schedule, occurrence = row.schedule, row.occurrence
    assert schedule is not None and occurrence is not None and row.run_id is not None  # it names all three
    run = Run.objects.filter(pk=row.run_id).first()
    zone = zoneinfo.ZoneInfo(owner_timezone(row.owner_id))
    slot = occurrence.scheduled_for.astimezone(zone)
    schedule_url = settings.SITE_URL + reverse("schedules:detail", args=[schedule.pk])
    conversation_url = (
        settings.SITE_URL + reverse("runs:conversation", args=[run.conversation_id]) if run else None
    )
    run_url = settings.SITE_URL + reverse("runs:detail", args=[row.run_id]) if run else None
    answer = run.answer[:ANSWER_CHARS] if run else ""
    usage = run.usage() if run else None
    when = f"{slot:%a} {slot.day} {slot:%b %Y at %H:%M} {slot.tzname()}"
    lines = [f"“{schedule.title}” completed its run of {when}.", ""]
    if run is None:
        lines.append("The run has since been deleted with its conversation.")
    else:
        lines += [answer or "(The run completed without an answer.)", ""]
        lines.append(
            f"Usage: {run.steps} steps, {run.model_calls} model calls, {run.tool_calls} tool calls, "
            f"USD {format_money(run.cost)}."
        )
        lines.append(f"Read it in its conversation: {conversation_url}")
    lines += [
        f"The schedule: {schedule_url}",
        f"Choose what you are told: {settings.SITE_URL + reverse('schedules:settings')}",
    ]
    payload: dict[str, Any] = {
        "event": EVENT,
        "schedule": {"id": schedule.pk, "title": schedule.title, "url": schedule_url},
        "occurrence": {"id": occurrence.pk, "scheduled_for": occurrence.scheduled_for.isoformat()},
        "run": {
            "id": row.run_id,
            "url": run_url,
            "conversation_id": run.conversation_id if run else None,
            "conversation_url": conversation_url,
            "finished_at": run.finished_at.isoformat() if run and run.finished_at else None,
            "usage": {**usage, "cost": format_money(usage["cost"])} if usage else None,
        },
        "answer_included": bool(include_answer and run),
        "answer": answer if include_answer and run else None,
        "test": False,
    }
    json.dumps(payload)  # fails here, not half-way through a delivery, if a value is not JSON
    return Message(subject=f"Completed: {schedule.title}", text="\n".join(lines), payload=payload)
