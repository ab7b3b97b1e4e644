"""Every schedule state transition, each one transaction with its audit row (docs/contract.md#schedules,
docs/decisions/0002).

Views, admin actions, API handlers, chat tools and tasks parse input, check ownership and call
exactly one of these.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from accounting import ledger
from accounting.models import AccountingEvent, OwnerBudget
from accounting.money import format_money
from accounting.selectors import owner_timezone
from runs.limits import RunLimits, validate_limits, with_reserves
from runs.models import Agent, Run
from schedules import recurrence, tokens
from schedules.models import (
    Occurrence,
    PauseEvent,
    RevisionRequest,
    RevisionRequestEvent,
    Schedule,
    ScheduleRevision,
)
from schedules.schemas import (
    DeclineBody,
    ExplicitRevision,
    InvalidSchedule,
    RevisionRequestBody,
    ScheduleCreate,
    ScheduleUpdate,
)

# The schedule.create policy (docs/decisions/0002, points 1 and 2).
CREATE_FAILURE_LIMIT = 2
CREATE_DEFAULT_COST = Decimal("5.00")  # when the agent has no finite cost limit
CREATE_RESERVE_STEPS = 2
CREATE_RESERVE_MODEL_CALLS = 2
CREATE_RESERVE_TOOL_CALLS = 0
CREATE_RESERVE_COST = Decimal("1.00")

PIN_PERMISSION = tokens.PIN_PERMISSION
CHAT = "chat"  # the `via` of what a model does in a conversation (schedules.tools)
MAX_RUN_AT_AHEAD = timedelta(days=5 * 366)


class NotActive(Exception):
    """Only an active schedule can be paused."""


class NotPaused(Exception):
    """Only a paused schedule can be resumed."""


class ScheduleCompleted(Exception):
    """A completed schedule cannot be edited."""


class ScheduleLimit(Exception):
    """The owner already has as many active schedules as they may have (docs/contract.md#schedules, per-owner
    caps)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        schedules = "1 active schedule" if limit == 1 else f"{limit} active schedules"
        self.message = (
            f"You already have {schedules}, the most you may have at once: pause one first, or "
            "ask an admin to raise your limit."
        )
        super().__init__(self.message)


def _user_id(user: AbstractBaseUser | None) -> int | None:
    return int(user.pk) if user is not None and user.pk is not None else None


# -- definitions ----------------------------------------------------------------------------------


def create_policy_limits(agent: Agent, owner_id: int) -> RunLimits:
    """What schedule.create pins: cost = min(agent's finite cost or USD 5, the schedule cost
    ceiling); reserves of 2 steps, 2 model calls and USD 1, each kept only when strictly below its
    total; the agent's defaults for everything else."""
    ceiling = ledger.budget_for(owner_id).effective_schedule_cost_ceiling
    agent_cost = agent.cost_limit if agent.cost_limit is not None else CREATE_DEFAULT_COST
    base = agent.limits.model_copy(update={"max_cost": min(agent_cost, ceiling)})
    pinned = with_reserves(
        base,
        steps=CREATE_RESERVE_STEPS,
        model_calls=CREATE_RESERVE_MODEL_CALLS,
        tool_calls=CREATE_RESERVE_TOOL_CALLS,
        cost=CREATE_RESERVE_COST,
    )
    return validate_limits(pinned.to_json())  # model_copy skips validation; the pinned value must not


def _check_room(owner_id: int) -> None:
    """One more active schedule must fit under the owner's cap. Under the owner's budget row
    lock, so twenty concurrent creations cannot all see room for one."""
    budget = OwnerBudget.objects.select_for_update().get(owner_id=owner_id)
    limit = budget.effective_max_active_schedules
    if Schedule.objects.filter(owner_id=owner_id, status=Schedule.Status.ACTIVE).count() >= limit:
        raise ScheduleLimit(limit)


def _check_chat_interval(owner_id: int, cron: str) -> None:
    """A schedule a model sets up in chat fires at most every CHAT_MIN_INTERVAL_MINUTES (or the
    owner's override): a model cannot fill the owner's budget with `* * * * *`."""
    minimum = ledger.budget_for(owner_id).effective_chat_min_interval_minutes
    interval = recurrence.parse_cron(cron).shortest_interval
    if interval < timedelta(minutes=minimum):
        raise InvalidSchedule(
            {
                "cron": (
                    f"a schedule made in chat may fire at most every {_minutes(minimum)}; "
                    f"{cron!r} fires every {_minutes(int(interval.total_seconds() // 60))}"
                )
            }
        )


def _minutes(count: int) -> str:
    return "minute" if count == 1 else f"{count} minutes"


def _active_agent(name: str) -> Agent:
    agent = Agent.objects.filter(name=name, is_active=True).first()
    if agent is None:
        raise InvalidSchedule({"agent": f"there is no active agent named {name!r}"})
    return agent


def _check_recurrence(kind: str, cron: str, tz: str, run_at: datetime | None, now: datetime) -> datetime:
    """The first slot of a definition, or InvalidSchedule naming the field at fault."""
    if kind == Schedule.Kind.ONE_TIME:
        assert run_at is not None
        if run_at <= now:
            raise InvalidSchedule({"run_at": "run_at must be in the future"})
        if run_at > now + MAX_RUN_AT_AHEAD:
            raise InvalidSchedule({"run_at": "run_at must be within the next 5 years"})
        return run_at
    try:
        recurrence.validate(cron, tz, now=now)
    except recurrence.InvalidRecurrence as exc:
        raise InvalidSchedule({"cron": str(exc)}) from None
    first = recurrence.next_slot(recurrence.parse_cron(cron), recurrence.parse_timezone(tz), now)
    assert first is not None
    return first


def create_schedule(
    owner: AbstractBaseUser,
    data: ScheduleCreate,
    *,
    via: str,
    now: datetime | None = None,
    conversation_id: int | None = None,
    run_id: int | None = None,
) -> Schedule:
    """schedule.create: the owner's new schedule with revision 1 pinned by the policy. In chat,
    the revision names the conversation and run that wrote it."""
    now = now or timezone.now()
    owner_id = _user_id(owner)
    assert owner_id is not None
    if data.run_at is not None and data.cron is not None:
        raise InvalidSchedule(
            {"cron": "give either run_at (one-time) or cron and timezone (recurring), not both"}
        )
    if data.run_at is None and data.cron is None:
        raise InvalidSchedule(
            {"cron": "give run_at for a one-time schedule, or cron and timezone for a recurring one"}
        )
    if data.cron is not None and data.timezone is None:
        raise InvalidSchedule(
            {"timezone": "timezone is required with cron (an IANA name such as Europe/Riga)"}
        )
    agent = _active_agent(data.agent)
    kind = Schedule.Kind.ONE_TIME if data.run_at is not None else Schedule.Kind.RECURRING
    tz = data.timezone or owner_timezone(owner_id)
    cron = data.cron or ""
    first_slot = _check_recurrence(kind, cron, tz, data.run_at, now)
    if via == CHAT and kind == Schedule.Kind.RECURRING:
        _check_chat_interval(owner_id, cron)
    limits = create_policy_limits(agent, owner_id)
    with transaction.atomic():
        _check_room(owner_id)
        schedule = Schedule.objects.create(
            owner_id=owner_id,
            title=data.title,
            kind=kind,
            status=Schedule.Status.ACTIVE,
            next_occurrence_at=first_slot,
        )
        revision = ScheduleRevision.objects.create(
            schedule=schedule,
            number=1,
            created_at=now,
            created_by_id=owner_id,
            path=ScheduleRevision.Path.CREATE,
            via=via,
            title=data.title,
            prompt=data.prompt,
            cron=cron,
            timezone=tz,
            run_at=data.run_at,
            agent=agent,
            limits=limits.to_json(),
            max_consecutive_failures=CREATE_FAILURE_LIMIT,
            conversation_id=conversation_id,
            run_id=run_id,
        )
        Schedule.objects.filter(pk=schedule.pk).update(current_revision=revision)
    schedule.current_revision = revision
    return schedule


def _next_revision(
    schedule: Schedule, *, by: AbstractBaseUser | None, now: datetime, **fields: Any
) -> ScheduleRevision:
    """Revision n+1 copying the current one, with `fields` changed. Caller holds the row lock."""
    current = schedule.revision
    values = {
        "title": current.title,
        "prompt": current.prompt,
        "cron": current.cron,
        "timezone": current.timezone,
        "run_at": current.run_at,
        "agent_id": current.agent_id,
        "limits": current.limits,
        "max_consecutive_failures": current.max_consecutive_failures,
        "reason": "",
        **fields,
    }
    return ScheduleRevision.objects.create(
        schedule=schedule, number=current.number + 1, created_at=now, created_by_id=_user_id(by), **values
    )


def _locked(schedule: Schedule) -> Schedule:
    locked = _locked_if(schedule, status=None)
    assert locked is not None
    return locked


def _locked_if(schedule: Schedule, *, status: str | None) -> Schedule | None:
    """The schedule's row, locked for this transaction, if it (still) has `status`; else None.
    Taking the lock first is what makes a double click or a race one transition.

    The bare row is locked and its revision read afterwards: with a join in the locking query,
    PostgreSQL rechecks a row that changed while we waited against the *old* joined revision,
    and the writer that waited saw no current revision at all (lock the row, not the
    join). Read after the lock, the revision is the one the previous writer committed."""
    rows = Schedule.objects.select_for_update()
    if status is not None:
        rows = rows.filter(status=status)
    locked = rows.filter(pk=schedule.pk).first()
    if locked is not None and locked.current_revision_id is not None:
        locked.current_revision = ScheduleRevision.objects.get(pk=locked.current_revision_id)
    return locked


def update_schedule(
    schedule: Schedule,
    data: ScheduleUpdate,
    *,
    by: AbstractBaseUser,
    via: str,
    now: datetime | None = None,
    conversation_id: int | None = None,
    run_id: int | None = None,
) -> Schedule:
    """schedule.update: a new revision with title, prompt, recurrence or time zone changed, limits
    and failure limit copied. No revision when nothing changes. The count is untouched. In chat,
    the revision names the conversation and run that wrote it."""
    now = now or timezone.now()
    changes = data.changes()
    with transaction.atomic():
        locked = _locked(schedule)
        if locked.status == Schedule.Status.COMPLETED:
            raise ScheduleCompleted(schedule)
        current = locked.revision
        if locked.kind == Schedule.Kind.ONE_TIME and "cron" in changes:
            raise InvalidSchedule({"cron": "a one-time schedule has run_at, not cron"})
        if locked.kind == Schedule.Kind.RECURRING and "run_at" in changes:
            raise InvalidSchedule({"run_at": "a recurring schedule has cron, not run_at"})
        for field in ("title", "prompt", "cron", "timezone", "run_at"):
            if field in changes and changes[field] is None:
                raise InvalidSchedule({field: f"{field} cannot be empty"})
        merged = {
            field: changes.get(field, getattr(current, field))
            for field in ("title", "prompt", "cron", "timezone", "run_at")
        }
        if all(merged[field] == getattr(current, field) for field in merged):
            return locked
        recurrence_changed = any(merged[f] != getattr(current, f) for f in ("cron", "timezone", "run_at"))
        first_slot = None
        if recurrence_changed:
            first_slot = _check_recurrence(
                locked.kind, merged["cron"], merged["timezone"], merged["run_at"], now
            )
            if via == CHAT and locked.kind == Schedule.Kind.RECURRING:
                _check_chat_interval(locked.owner_id, merged["cron"])
        revision = _next_revision(
            locked,
            by=by,
            now=now,
            path=ScheduleRevision.Path.UPDATE,
            via=via,
            conversation_id=conversation_id,
            run_id=run_id,
            **merged,
        )
        update: dict[str, Any] = {"current_revision": revision, "title": merged["title"]}
        if recurrence_changed and locked.status == Schedule.Status.ACTIVE:
            update["next_occurrence_at"] = first_slot
        Schedule.objects.filter(pk=locked.pk).update(**update)
    locked.refresh_from_db()
    return locked


class RevisionChanged(Exception):
    """The schedule got a newer revision than the one the change was reviewed against."""


def pin_revision(
    schedule: Schedule,
    data: ExplicitRevision,
    *,
    by: AbstractBaseUser,
    via: str,
    now: datetime | None = None,
    expected_number: int | None = None,
    request: RevisionRequest | None = None,
) -> ScheduleRevision:
    """An explicit revision: the only way limits or the failure limit change (docs/decisions/0002, point 4).
    Earlier revisions and already materialized runs keep their values. With `expected_number`,
    raises RevisionChanged if another revision was written since (checked under the row lock).
    `request`: the owner's revision request it answers (pin_from_request), recorded on it."""
    if not by.has_perm(PIN_PERMISSION):  # type: ignore[attr-defined]
        raise PermissionDenied("Pinning a revision needs the pin_revision permission.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = _locked(schedule)
        if locked.status == Schedule.Status.COMPLETED:
            raise ScheduleCompleted(schedule)
        if expected_number is not None and locked.revision.number != expected_number:
            raise RevisionChanged(schedule)
        revision = _next_revision(
            locked,
            by=by,
            now=now,
            path=ScheduleRevision.Path.EXPLICIT,
            via=via,
            reason=data.reason,
            limits=data.limits.to_json(),
            max_consecutive_failures=data.max_consecutive_failures,
            request=request,
        )
        Schedule.objects.filter(pk=locked.pk).update(current_revision=revision)
    return revision


# -- revision requests ----------------------------------------------------------------------------


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
    if _user_id(by) != schedule.owner_id:
        raise PermissionDenied("Only the schedule's owner may ask for new limits.")
    with transaction.atomic():
        locked = _locked(schedule)  # two clicks at once queue here; the second finds the first
        if locked.status == Schedule.Status.COMPLETED:
            raise ScheduleCompleted(schedule)
        waiting = RevisionRequest.objects.filter(schedule=locked, state=RevisionRequest.State.OPEN).first()
        if waiting is not None:
            raise RequestAlreadyOpen(waiting)
        now = now or timezone.now()
        request = RevisionRequest.objects.create(
            schedule=locked,
            requested_by_id=_user_id(by),
            created_at=now,
            via=via,
            base_revision=locked.revision.number,
            limits=data.limits.to_json(),
            max_consecutive_failures=data.max_consecutive_failures,
            reason=data.reason,
        )
        RevisionRequestEvent.objects.create(
            request=request,
            action=RevisionRequestEvent.Action.REQUESTED,
            actor_id=_user_id(by),
            via=via,
            created_at=now,
        )
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
        schedule = _locked(Schedule(pk=request.schedule_id))
        locked = RevisionRequest.objects.select_for_update().get(pk=request.pk)
        if not locked.is_open:
            raise RequestDecided(locked)
        revision = pin_revision(
            schedule, data, by=by, via=via, now=now, expected_number=expected_number, request=locked
        )
        RevisionRequest.objects.filter(pk=locked.pk).update(
            state=RevisionRequest.State.PINNED,
            decided_by_id=_user_id(by),
            decided_at=revision.created_at,
            revision=revision,
        )
        RevisionRequestEvent.objects.create(
            request=locked,
            action=RevisionRequestEvent.Action.PINNED,
            actor_id=_user_id(by),
            via=via,
            detail=f"revision {revision.number}",
            created_at=revision.created_at,
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
        locked = RevisionRequest.objects.select_for_update().get(pk=request.pk)
        if not locked.is_open:
            raise RequestDecided(locked)
        now = now or timezone.now()  # after the lock, so decisions follow commit order
        RevisionRequest.objects.filter(pk=locked.pk).update(
            state=RevisionRequest.State.DECLINED,
            decided_by_id=_user_id(by),
            decided_at=now,
            decline_reason=data.reason,
        )
        RevisionRequestEvent.objects.create(
            request=locked,
            action=RevisionRequestEvent.Action.DECLINED,
            actor_id=_user_id(by),
            via=via,
            created_at=now,
        )
    locked.refresh_from_db()
    return locked


# -- pause and resume ---------------------------------------------------------------------------


def _pause_locked(
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
    # A pause the schedule made itself is the outbox of its notice (notified_at is null): the
    # delivery task sends it once it has committed; a rolled-back pause leaves nothing to send.
    return event


def pause_schedule(schedule: Schedule, *, by: AbstractBaseUser, now: datetime | None = None) -> Schedule:
    """active -> paused, reason `owner`, or `admin` when someone else (an admin) pauses it.
    Raises NotActive otherwise, so a double click gives one transition."""
    reason = PauseEvent.Reason.OWNER if _user_id(by) == schedule.owner_id else PauseEvent.Reason.ADMIN
    with transaction.atomic():
        locked = _locked_if(schedule, status=Schedule.Status.ACTIVE)
        if locked is None:
            raise NotActive(schedule)
        now = now or timezone.now()  # after the lock, so audit times follow commit order
        _pause_locked(locked, reason=reason, actor_id=_user_id(by), now=now)
    schedule.refresh_from_db()
    return schedule


def pause_for_invalid_definition(schedule: Schedule, *, detail: str, now: datetime | None = None) -> bool:
    """The system pauses an active schedule it cannot materialize, with a sanitized reason."""
    with transaction.atomic():
        locked = _locked_if(schedule, status=Schedule.Status.ACTIVE)
        if locked is None:
            return False
        now = now or timezone.now()  # after the lock, so audit times follow commit order
        _pause_locked(
            locked, reason=PauseEvent.Reason.INVALID_DEFINITION, actor_id=None, now=now, detail=detail
        )
    return True


def resume_schedule(schedule: Schedule, *, by: AbstractBaseUser, now: datetime | None = None) -> Schedule:
    """paused -> active. Keeps consecutive_failures (docs/decisions/0002): until a run completes, the next
    failure pauses it again. The next slot is computed after now: no backfill. Raises NotPaused."""
    with transaction.atomic():
        locked = _locked_if(schedule, status=Schedule.Status.PAUSED)
        if locked is None:
            raise NotPaused(schedule)
        _check_room(locked.owner_id)
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
            actor_id=_user_id(by),
            failures_at_event=locked.consecutive_failures,
            failure_limit=revision.max_consecutive_failures,
            created_at=now,
        )
        Schedule.objects.filter(pk=locked.pk).update(
            status=Schedule.Status.ACTIVE, pause=None, next_occurrence_at=next_at
        )
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
    for schedule in pending.values():
        schedule.status, schedule.pause, schedule.next_occurrence_at = Schedule.Status.COMPLETED, None, None
    return list(pending)


# -- outcomes -----------------------------------------------------------------------------------

_OUTCOME_OF: dict[str, str] = {
    Run.Status.COMPLETED: Occurrence.Outcome.COMPLETED,
    Run.Status.FAILED: Occurrence.Outcome.FAILED,
    Run.Status.CANCELLED: Occurrence.Outcome.CANCELLED,
}


def run_accounted_payload(occurrence: Occurrence, run: Run) -> dict[str, Any]:
    """The content-free body of `schedule.run_accounted` (docs/contract.md#schedules, docs/decisions/0002,
    point 3)."""
    return {
        "event": "schedule.run_accounted",
        "schedule_id": occurrence.schedule_id,
        "occurrence_id": occurrence.pk,
        "scheduled_for": occurrence.scheduled_for.isoformat(),
        "revision": occurrence.revision.number,
        "run_id": run.pk,
        "status": run.status,
        "usage": {
            "steps": run.steps,
            "model_calls": run.model_calls,
            "tool_calls": run.tool_calls,
            "cost": format_money(run.cost),
        },
        "failure": run.failure_summary(),
    }


def record_late_usage(run: Run, usage: dict[str, Any], *, now: datetime | None = None) -> None:
    """A scheduled run's provider response arrived after its outcome was accounted: account the
    extra usage as `schedule.late_usage_accounted`, so the events of a run always sum to its
    counters and its ledger entries. A delegated child's usage counts against the occurrence's
    own run. Called inside the transaction that recorded the usage."""
    while run.parent_id is not None:
        run = Run.objects.get(pk=run.parent_id)
    occurrence = Occurrence.objects.filter(run_id=run.pk).select_related("revision").first()
    if occurrence is None:
        return
    payload = {
        **run_accounted_payload(occurrence, run),
        "event": AccountingEvent.Kind.LATE_USAGE.value,
        "usage": {**usage, "cost": format_money(usage["cost"])},
        "failure": None,
    }
    ledger.record_run_accounted(
        owner_id=run.owner_id,
        schedule_id=occurrence.schedule_id,
        run_id=run.pk,
        payload=payload,
        at=now or timezone.now(),
        kind=AccountingEvent.Kind.LATE_USAGE,
    )


def record_run_outcome(run: Run, *, now: datetime | None = None) -> Occurrence | None:
    """A scheduled run ended: record the occurrence outcome, count it, pause at the failure limit,
    complete a one-time schedule, and write `schedule.run_accounted`.

    Called inside the transaction that writes the run's terminal state (runs.signals), so the
    event and the count can never disagree with the run. Not a scheduled run: does nothing.
    """
    occurrence = Occurrence.objects.select_for_update().filter(run_id=run.pk).first()
    if occurrence is None:
        return None
    schedule = _locked_if(Schedule(pk=occurrence.schedule_id), status=None)
    assert schedule is not None  # the occurrence's foreign key keeps its schedule
    now = now or timezone.now()
    outcome = _OUTCOME_OF.get(run.status)
    if outcome is None:
        return occurrence
    Occurrence.objects.filter(pk=occurrence.pk).update(outcome=outcome, finished_at=now)
    occurrence.outcome = outcome

    failures = schedule.consecutive_failures
    if run.status == Run.Status.COMPLETED:
        failures = 0
    elif run.status == Run.Status.FAILED:
        failures += 1
    schedule.consecutive_failures = failures
    event = ledger.record_run_accounted(
        owner_id=schedule.owner_id,
        schedule_id=schedule.pk,
        run_id=run.pk,
        payload=run_accounted_payload(occurrence, run),
        at=now,
    )
    Schedule.objects.filter(pk=schedule.pk).update(consecutive_failures=failures, last_event=event)

    if schedule.kind == Schedule.Kind.ONE_TIME:
        # Its only occurrence ran, whatever the outcome (which is still counted above).
        complete_schedules([schedule], now=now, detail=f"its only run ended {run.status}")
    elif (
        run.status == Run.Status.FAILED
        and failures >= occurrence.revision.max_consecutive_failures
        and schedule.status == Schedule.Status.ACTIVE
    ):
        _pause_locked(
            schedule,
            reason=PauseEvent.Reason.FAILURE_LIMIT,
            actor_id=None,
            now=now,
            run_id=run.pk,
            failure_limit=occurrence.revision.max_consecutive_failures,
        )
    return occurrence
