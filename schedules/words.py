"""Pauses in plain words: what the failure count means for the next run, and why a schedule is
paused, in one sentence. The words for a failure itself come from runs.failures."""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping, Sequence
from datetime import datetime

from accounting.formatting import local_text
from accounting.models import AccountingEvent
from accounting.timezones import owner_zone
from runs.failures import Failure
from schedules.models import PauseEvent, Schedule

FAILURES_NAMED = 5  # a longer streak is summarized as "and N earlier"


def _zone(tz: str) -> zoneinfo.ZoneInfo:
    return owner_zone(tz)


# -- the failure count, in plain words -----------------------------------------------------------


def count_sentence(count: int, limit: int, *, kept: bool) -> str:
    """What the failure count means for the next run. `kept`: said of a resume (before and after)."""
    verb = "stays at" if kept else "is"
    head = f"The failure count {verb} {count} of {limit}"
    if count == 0:
        return f"{head}: {limit} failed runs in a row pause the schedule."
    if count + 1 >= limit:
        again = "pauses again" if kept else "pauses"
        return f"{head}: if the next run fails, the schedule {again}; a completed run resets it."
    more = limit - count
    return f"{head}: {more} more failed runs in a row pause the schedule; a completed run resets it."


def _day(value: str | None, zone: zoneinfo.ZoneInfo) -> str:
    if not value:
        return ""
    try:
        return local_text(datetime.fromisoformat(value), zone, "day")
    except ValueError:
        return ""


def _actor_words(pause: PauseEvent, owner_id: int) -> str:
    if pause.actor_id is None:
        return "by the system"
    if pause.actor_id == owner_id:
        return "by you"
    name = pause.actor.get_username() if pause.actor else "an admin"
    return f"by an admin ({name})"


def _streak(count: int) -> str:
    runs = "run" if count == 1 else "runs"
    return f"after {count} consecutive failed {runs}" if count > 1 else "after 1 failed run"


def pause_summary(pause: PauseEvent, tz: str) -> str:
    """When and after how many failures, without naming them: "Paused on 3 Sep at 09:02 EEST
    after 2 consecutive failed runs." (the status panel lists each failure in words below it)."""
    zone = _zone(tz)
    local = pause.created_at.astimezone(zone)
    return (
        f"Paused on {local_text(local, zone, 'day')} at {local_text(local, zone, 'time')} "
        f"{_streak(pause.failures_at_event)}."
    )


def pause_explanation(
    schedule: Schedule,
    pause: PauseEvent,
    events: Sequence[AccountingEvent],
    dimensions: Mapping[int, str],
    tz: str,
) -> str:
    """Why the schedule is paused, in one sentence.

    "Paused on 3 Sep at 09:02 EEST after 2 consecutive failed runs: budget exhausted (cost) on
    2 Sep, provider error 529 overloaded_error on 3 Sep." `events` are the schedule's newest
    accounting events, newest first; the failures counted are the newest ones at the pause.
    """
    zone = _zone(tz)
    local = pause.created_at.astimezone(zone)
    when = f"Paused on {local_text(local, zone, 'day')} at {local_text(local, zone, 'time')}"
    if pause.reason == PauseEvent.Reason.OWNER:
        return f"{when} {_actor_words(pause, schedule.owner_id)}."
    if pause.reason == PauseEvent.Reason.ADMIN:
        return f"{when} {_actor_words(pause, schedule.owner_id)}."
    if pause.reason == PauseEvent.Reason.INVALID_DEFINITION:
        detail = f": {pause.detail}" if pause.detail else ""
        return f"{when} by the system, because the schedule could not be run as defined{detail}."
    count = pause.failures_at_event
    counted = [e for e in events if e.created_at <= pause.created_at and e.failure][:count]
    named = list(reversed(counted[:FAILURES_NAMED]))
    parts = []
    for event in named:
        failure = Failure.from_payload(event.failure, dimensions.get(event.run_id or 0, ""))
        assert failure is not None
        day = _day(event.payload.get("scheduled_for"), zone)
        parts.append(f"{failure.short} on {day}" if day else failure.short)
    earlier = count - len(named)
    streak = _streak(count)
    listed = ", ".join(parts)
    if earlier > 0 and parts:
        listed = f"{listed} (and {earlier} earlier)"
    return f"{when} {streak}: {listed}." if listed else f"{when} {streak}."
