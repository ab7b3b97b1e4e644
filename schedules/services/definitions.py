"""Creating schedules and changing their definitions: the chat policy's limits, per-owner caps,
updates, and explicit revisions (docs/contract.md#schedules, docs/decisions/0002).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from accounting import ledger
from accounting.models import OwnerBudget
from accounting.money import format_money
from accounting.selectors import owner_timezone
from runs.limits import RunLimits, validate_limits, with_reserves
from runs.models import Agent
from schedules import recurrence, tokens
from schedules.forecast import table as forecast_table
from schedules.models import (
    RevisionRequest,
    Schedule,
    ScheduleRevision,
)
from schedules.schemas import (
    ExplicitRevision,
    InvalidSchedule,
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


def is_admin(user: Any) -> bool:
    """docs/contract.md#people-and-permissions: an admin is staff with the pin permission, and may
    act on any schedule (and sees every owner's runs in flight)."""
    return bool(user.is_staff and user.has_perm(PIN_PERMISSION))


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


def user_id_of(user: AbstractBaseUser | None) -> int | None:
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


def check_room(owner_id: int, *, lock: bool = True) -> None:
    """One more active schedule must fit under the owner's cap. Under the owner's budget row
    lock, so twenty concurrent creations cannot all see room for one; `lock=False` reads the same
    rule without it, for a check that writes no schedule (a proposal, schedules.proposals)."""
    budget = (
        OwnerBudget.objects.select_for_update().get(owner_id=owner_id)
        if lock
        else ledger.budget_for(owner_id)
    )
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


@dataclass(frozen=True)
class CheckedCreate:
    """A schedule.create definition that passed every check made before anything is written."""

    agent: Agent
    kind: str
    cron: str
    timezone: str
    first_slot: datetime
    limits: RunLimits


def check_create(owner_id: int, data: ScheduleCreate, *, via: str, now: datetime) -> CheckedCreate:
    """Every check of schedule.create before it writes (the cap on active schedules aside, which
    is read under a lock when writing): run_at or cron with timezone, an active agent, a
    recurrence that fires, the chat interval; with the limits the policy pins. Raises
    InvalidSchedule naming the field. Shared by create_schedule and chat proposals."""
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
    return CheckedCreate(agent, kind, cron, tz, first_slot, limits)


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
    owner_id = user_id_of(owner)
    assert owner_id is not None
    checked = check_create(owner_id, data, via=via, now=now)
    with transaction.atomic():
        check_room(owner_id)
        schedule = Schedule.objects.create(
            owner_id=owner_id,
            title=data.title,
            kind=checked.kind,
            status=Schedule.Status.ACTIVE,
            next_occurrence_at=checked.first_slot,
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
            cron=checked.cron,
            timezone=checked.timezone,
            run_at=data.run_at,
            agent=checked.agent,
            limits=checked.limits.to_json(),
            max_consecutive_failures=CREATE_FAILURE_LIMIT,
            conversation_id=conversation_id,
            run_id=run_id,
        )
        Schedule.objects.filter(pk=schedule.pk).update(current_revision=revision)
        forecast_table.sync([schedule.pk], now=now)
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
        "monthly_cap": current.monthly_cap,
        "reason": "",
        **fields,
    }
    return ScheduleRevision.objects.create(
        schedule=schedule, number=current.number + 1, created_at=now, created_by_id=user_id_of(by), **values
    )


def lock_schedule(schedule: Schedule) -> Schedule:
    locked = lock_schedule_if(schedule, status=None)
    assert locked is not None
    return locked


def lock_schedule_if(schedule: Schedule, *, status: str | None) -> Schedule | None:
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
        locked = lock_schedule(schedule)
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
        forecast_table.sync([locked.pk], now=now)
    locked.refresh_from_db()
    return locked


class RevisionChanged(Exception):
    """The schedule got a newer revision than the one the change was reviewed against."""


def cap_of(data: ExplicitRevision, current: ScheduleRevision) -> Decimal | None:
    """The monthly cap an explicit revision pins: the one given (null: none), or the current one when
    the body leaves it out; refused when it is below the new cost limit (it could never admit a run)."""
    cap = data.monthly_cap if "monthly_cap" in data.model_fields_set else current.monthly_cap
    if cap is not None and cap < data.limits.max_cost:
        raise InvalidSchedule(
            {
                "monthly_cap": f"monthly_cap: USD {format_money(cap)} is below the cost limit of one run "
                f"(USD {format_money(data.limits.max_cost)}), so it could never admit a run"
            }
        )
    return cap


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
        locked = lock_schedule(schedule)
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
            monthly_cap=cap_of(data, locked.revision),
            request=request,
        )
        Schedule.objects.filter(pk=locked.pk).update(current_revision=revision)
        forecast_table.sync([locked.pk], now=now)
    return revision
