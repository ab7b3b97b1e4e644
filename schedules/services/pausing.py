"""Pausing, resuming and completing schedules, each with its audit row (docs/contract.md#schedules)."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from schedules import recurrence
from schedules.forecast import table as forecast_table
from schedules.models import (
    PauseEvent,
    Schedule,
)
from schedules.notices import paused
from schedules.services.definitions import NotActive, NotPaused, check_room, lock_schedule_if, user_id_of


def pause_locked(
    schedule: Schedule,
    *,
    reason: str,
    actor_id: int | None,
    now: datetime,
    run_id: int | None = None,
    detail: str = "",
    failure_limit: int | None = None,
) -> PauseEvent:
    event = PauseEvent.objects.create(
        schedule=schedule,
        action=PauseEvent.Action.PAUSE,
        reason=reason,
        actor_id=actor_id,
        run_id=run_id,
        failures_at_event=schedule.consecutive_failures,
        failure_limit=failure_limit or schedule.revision.max_consecutive_failures,
        detail=detail[:300],
        created_at=now,
    )
    Schedule.objects.filter(pk=schedule.pk).update(status=Schedule.Status.PAUSED, pause=event)
    forecast_table.sync([schedule.pk], now=now)
    # A pause the schedule made itself writes its notice here: the delivery task sends it once it
    # has committed; a rolled-back pause leaves nothing to send.
    paused.queue(event)
    return event


def pause_schedule(schedule: Schedule, *, by: AbstractBaseUser, now: datetime | None = None) -> Schedule:
    """active -> paused, reason `owner`, or `admin` when someone else (an admin) pauses it.
    Raises NotActive otherwise, so a double click gives one transition."""
    reason = PauseEvent.Reason.OWNER if user_id_of(by) == schedule.owner_id else PauseEvent.Reason.ADMIN
    with transaction.atomic():
        locked = lock_schedule_if(schedule, status=Schedule.Status.ACTIVE)
        if locked is None:
            raise NotActive(schedule)
        now = now or timezone.now()  # after the lock, so audit times follow commit order
        pause_locked(locked, reason=reason, actor_id=user_id_of(by), now=now)
    schedule.refresh_from_db()
    return schedule


def pause_for_invalid_definition(schedule: Schedule, *, detail: str, now: datetime | None = None) -> bool:
    """The system pauses an active schedule it cannot materialize, with a sanitized reason."""
    with transaction.atomic():
        locked = lock_schedule_if(schedule, status=Schedule.Status.ACTIVE)
        if locked is None:
            return False
        now = now or timezone.now()  # after the lock, so audit times follow commit order
        pause_locked(
            locked, reason=PauseEvent.Reason.INVALID_DEFINITION, actor_id=None, now=now, detail=detail
        )
    return True


def resume_schedule(schedule: Schedule, *, by: AbstractBaseUser, now: datetime | None = None) -> Schedule:
    """paused -> active. Keeps consecutive_failures (docs/decisions/0002): until a run completes, the next
    failure pauses it again. The next slot is computed after now: no backfill. Raises NotPaused."""
    with transaction.atomic():
        locked = lock_schedule_if(schedule, status=Schedule.Status.PAUSED)
        if locked is None:
            raise NotPaused(schedule)
        check_room(locked.owner_id)
        now = now or timezone.now()  # after the lock, so audit times follow commit order
        revision = locked.revision
        if locked.kind == Schedule.Kind.ONE_TIME:
            # Its only slot: if it passed while paused, the tick records it missed (grace window).
            next_at = revision.run_at
        else:
            try:
                next_at = locked.next_slot_after(now)
            except recurrence.InvalidRecurrence:
                next_at = None  # the tick pauses it again with the reason
        PauseEvent.objects.create(
            schedule=locked,
            action=PauseEvent.Action.RESUME,
            actor_id=user_id_of(by),
            failures_at_event=locked.consecutive_failures,
            failure_limit=revision.max_consecutive_failures,
            created_at=now,
        )
        Schedule.objects.filter(pk=locked.pk).update(
            status=Schedule.Status.ACTIVE, pause=None, next_occurrence_at=next_at
        )
        forecast_table.sync([locked.pk], now=now)
    schedule.refresh_from_db()
    return schedule


def complete_schedules(schedules: list[Schedule], *, now: datetime, detail: str) -> list[int]:
    """A one-time schedule whose only slot has passed -> completed, with an event row each.
    Callers hold the rows' locks (the tick that found the slot missed, or the outcome of its only
    run). Compare-and-swap: already completed ones are left alone. Returns the ids completed."""
    pending = {s.pk: s for s in schedules if s.status != Schedule.Status.COMPLETED}
    if not pending:
        return []
    Schedule.objects.filter(pk__in=pending).update(
        status=Schedule.Status.COMPLETED, pause=None, next_occurrence_at=None
    )
    PauseEvent.objects.bulk_create(
        [
            PauseEvent(
                schedule=schedule,
                action=PauseEvent.Action.COMPLETE,
                failures_at_event=schedule.consecutive_failures,
                failure_limit=schedule.revision.max_consecutive_failures,
                detail=detail[:300],
                created_at=now,
            )
            for schedule in pending.values()
        ]
    )
    forecast_table.sync(list(pending), now=now)
    for schedule in pending.values():
        schedule.status, schedule.pause, schedule.next_occurrence_at = Schedule.Status.COMPLETED, None, None
    return list(pending)
