"""An owner's request for new limits, and an admin's decision: pin from it or decline
(docs/contract.md#conversations).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from schedules.models import (
    RevisionRequest,
    RevisionRequestEvent,
    Schedule,
    ScheduleRevision,
)
from schedules.notices import decided
from schedules.schemas import (
    DeclineBody,
    ExplicitRevision,
    RevisionRequestBody,
)
from schedules.services.definitions import (
    PIN_PERMISSION,
    ScheduleCompleted,
    cap_of,
    lock_schedule,
    pin_revision,
    user_id_of,
)


class RequestAlreadyOpen(Exception):
    """The schedule already has an open revision request (one at a time)."""

    def __init__(self, request: RevisionRequest) -> None:
        super().__init__(f"Revision request {request.pk} is still open.")
        self.request = request


class RequestDecided(Exception):
    """The revision request was already pinned or declined."""

    def __init__(self, request: RevisionRequest) -> None:
        super().__init__(f"Revision request {request.pk} is already {request.state}.")
        self.request = request


def request_revision(
    schedule: Schedule,
    data: RevisionRequestBody,
    *,
    by: AbstractBaseUser,
    via: str,
    now: datetime | None = None,
) -> RevisionRequest:
    """The owner asks for new limits (docs/contract.md#conversations): the request and its event, in one
    transaction.
    Only the owner; one open request per schedule, so a repeat raises RequestAlreadyOpen with the
    request already waiting. A completed schedule raises ScheduleCompleted."""
    if user_id_of(by) != schedule.owner_id:
        raise PermissionDenied("Only the schedule's owner may ask for new limits.")
    with transaction.atomic():
        locked = lock_schedule(schedule)  # two clicks at once queue here; the second finds the first
        if locked.status == Schedule.Status.COMPLETED:
            raise ScheduleCompleted(schedule)
        waiting = RevisionRequest.objects.filter(schedule=locked, state=RevisionRequest.State.OPEN).first()
        if waiting is not None:
            raise RequestAlreadyOpen(waiting)
        now = now or timezone.now()
        request = RevisionRequest.objects.create(
            schedule=locked,
            requested_by_id=user_id_of(by),
            created_at=now,
            via=via,
            base_revision=locked.revision.number,
            limits=data.limits.to_json(),
            max_consecutive_failures=data.max_consecutive_failures,
            monthly_cap=cap_of(data, locked.revision),
            reason=data.reason,
        )
        _record(request, RevisionRequestEvent.Action.REQUESTED, by=by, via=via, at=now)
    return request


def pin_from_request(
    request: RevisionRequest,
    data: ExplicitRevision,
    *,
    by: AbstractBaseUser,
    via: str,
    expected_number: int | None,
    now: datetime | None = None,
) -> ScheduleRevision:
    """Decide an open request by pinning `data` (the admin's final values, usually the request's)
    as an explicit revision that records the request: revision, request state and event in one
    transaction. Through pin_revision, so it needs the pin permission and honours
    `expected_number` (RevisionChanged). Decided already: RequestDecided, nothing written."""
    if not by.has_perm(PIN_PERMISSION):  # type: ignore[attr-defined]
        raise PermissionDenied("Deciding a revision request needs the pin_revision permission.")
    with transaction.atomic():
        # Schedule row first, then the request's: every writer takes them in this order.
        schedule = lock_schedule(Schedule(pk=request.schedule_id))
        locked = RevisionRequest.objects.select_for_update().get(pk=request.pk)
        if not locked.is_open:
            raise RequestDecided(locked)
        if "monthly_cap" not in data.model_fields_set:  # the decision keeps the cap the owner asked for
            data = data.model_copy(update={"monthly_cap": locked.monthly_cap})
            data.model_fields_set.add("monthly_cap")
        revision = pin_revision(
            schedule, data, by=by, via=via, now=now, expected_number=expected_number, request=locked
        )
        _decide(
            locked,
            RevisionRequestEvent.Action.PINNED,
            by=by,
            via=via,
            at=revision.created_at,
            detail=f"revision {revision.number}",
            state=RevisionRequest.State.PINNED,
            revision=revision,
        )
    return revision


def decline_request(
    request: RevisionRequest,
    data: DeclineBody,
    *,
    by: AbstractBaseUser,
    via: str,
    now: datetime | None = None,
) -> RevisionRequest:
    """Decide an open request by declining it, with the reason the owner is told. Needs the pin
    permission; decided already: RequestDecided, nothing written."""
    if not by.has_perm(PIN_PERMISSION):  # type: ignore[attr-defined]
        raise PermissionDenied("Deciding a revision request needs the pin_revision permission.")
    with transaction.atomic():
        # Schedule row first, then the request's, as pin_from_request: the notice this writes
        # references the schedule, and two deciders taking them in two orders would deadlock.
        lock_schedule(Schedule(pk=request.schedule_id))
        locked = RevisionRequest.objects.select_for_update().get(pk=request.pk)
        if not locked.is_open:
            raise RequestDecided(locked)
        now = now or timezone.now()  # after the lock, so decisions follow commit order
        _decide(
            locked,
            RevisionRequestEvent.Action.DECLINED,
            by=by,
            via=via,
            at=now,
            state=RevisionRequest.State.DECLINED,
            decline_reason=data.reason,
        )
    locked.refresh_from_db()
    return locked


def _decide(
    request: RevisionRequest,
    action: str,
    *,
    by: AbstractBaseUser,
    via: str,
    at: datetime,
    detail: str = "",
    **decision: Any,
) -> None:
    """A decision, in the caller's transaction: the request's new state, its event, and the
    owner's notice (sent once this commits)."""
    RevisionRequest.objects.filter(pk=request.pk).update(
        decided_by_id=user_id_of(by), decided_at=at, **decision
    )
    _record(request, action, by=by, via=via, at=at, detail=detail)
    decided.queue(request)


def _record(
    request: RevisionRequest, action: str, *, by: AbstractBaseUser, via: str, at: datetime, detail: str = ""
) -> None:
    RevisionRequestEvent.objects.create(
        request=request, action=action, actor_id=user_id_of(by), via=via, detail=detail, created_at=at
    )
