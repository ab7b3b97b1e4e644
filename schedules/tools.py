"""schedule.create and schedule.update as chat tools. They call the same services as the dashboard and
the API; the agent can never pass limits (docs/decisions/0002, point 4)."""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime, time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from accounting.money import format_money
from runs.tools import Tool, ToolContext, ToolError, register
from schedules import proposals, services
from schedules.models import Schedule, ScheduleRevision
from schedules.schemas import (
    NOT_UPDATABLE,
    InvalidSchedule,
    LimitsNotUpdatable,
    parse_create,
    parse_update,
)


class CreateArguments(BaseModel):
    # Extra keys are let through to the shared parser, which names them in its refusal.
    model_config = ConfigDict(extra="allow")
    title: str = Field(description="Short title, e.g. 'Morning technology briefing'.")
    prompt: str = Field(description="What each run should do.")
    run_at: str | None = Field(
        default=None, description="ISO 8601 time with offset, for a one-time schedule."
    )
    cron: str | None = Field(default=None, description="Cron or 'daily at 09:00', for a recurring schedule.")
    timezone: str | None = Field(default=None, description="IANA time zone for cron, e.g. Europe/Riga.")


class UpdateArguments(BaseModel):
    model_config = ConfigDict(extra="allow")
    schedule_id: int = Field(description="The schedule to change.")
    title: str | None = None
    prompt: str | None = None
    run_at: str | None = None
    cron: str | None = None
    timezone: str | None = None
    time_of_day: str | None = Field(
        default=None,
        description="Move it to this local time (HH:MM, e.g. 08:00), keeping its days (or its date).",
    )


_TIME_OF_DAY = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_NUMBER = re.compile(r"^\d+$")


def _refusal(error: InvalidSchedule) -> ToolError:
    return ToolError(
        "; ".join(
            message if message.startswith(field) else f"{field}: {message}"
            for field, message in error.fields.items()
        )
    )


def _next_run_words(schedule: Schedule) -> str:
    """ "Mon 7 Sep 2026 at 07:30 EEST", in the schedule's own time zone."""
    if schedule.next_occurrence_at is None:
        return "no further run is due"
    local = schedule.next_occurrence_at.astimezone(zoneinfo.ZoneInfo(schedule.revision.timezone))
    return f"next run {local:%a} {local.day} {local:%b %Y at %H:%M} {local.tzname()}"


def pinned_words(revision: ScheduleRevision) -> str:
    """What the policy pinned, as the owner reads it: budget, reserves, failure limit."""
    limits = revision.run_limits
    reserves = [
        f"{limits.synthesis_reserve_steps} steps" if limits.synthesis_reserve_steps else "",
        f"{limits.synthesis_reserve_model_calls} model calls" if limits.synthesis_reserve_model_calls else "",
        f"{limits.synthesis_reserve_tool_calls} tool calls" if limits.synthesis_reserve_tool_calls else "",
        f"USD {format_money(limits.synthesis_reserve_cost)}" if limits.synthesis_reserve_cost else "",
    ]
    named = [r for r in reserves if r]
    return (
        f"budget USD {format_money(limits.max_cost)} per run; "
        f"synthesis reserves {', '.join(named) if named else 'none'}; "
        f"pauses after {revision.max_consecutive_failures} consecutive failures"
    )


def _moved(schedule: Schedule, time_of_day: str) -> dict[str, Any]:
    """The recurrence of `schedule` at another local time of day, days (or date) kept."""
    match = _TIME_OF_DAY.match(time_of_day.strip())
    if match is None:
        raise ToolError("time_of_day must be a local time as HH:MM, such as 08:00")
    hour, minute = int(match.group(1)), int(match.group(2))
    revision = schedule.revision
    if schedule.kind == Schedule.Kind.ONE_TIME:
        assert revision.run_at is not None
        zone = zoneinfo.ZoneInfo(revision.timezone)
        day = revision.run_at.astimezone(zone).date()
        return {"run_at": datetime.combine(day, time(hour, minute), tzinfo=zone)}
    fields = revision.cron.split()
    if not (_NUMBER.match(fields[0]) and _NUMBER.match(fields[1])):
        raise ToolError(
            f"schedule {schedule.pk} runs at several times of day ({revision.cadence}); give a cron instead"
        )
    return {"cron": " ".join([str(minute), str(hour), *fields[2:]])}


def schedule_create(arguments: CreateArguments, context: ToolContext) -> str:
    data: dict[str, Any] = arguments.model_dump(exclude_none=True)
    limits = sorted(key for key in data if key in NOT_UPDATABLE)
    if limits:
        raise ToolError(
            f"{', '.join(limits)}: limits are pinned by the schedule.create policy and cannot be given"
        )
    if proposals.confirmation_on(context.run.owner_id):
        # docs/contract.md#confirm-before-chat-creates-a-schedule: the owner confirms it first.
        try:
            proposal = proposals.propose(context.run, data)
        except InvalidSchedule as error:
            raise _refusal(error) from None
        except services.ScheduleLimit as error:
            raise ToolError(error.message) from None
        return proposals.proposed_words(proposal)
    try:
        schedule = services.create_schedule(
            context.run.owner,
            parse_create({**data, "agent": context.agent.name}),
            via=services.CHAT,
            conversation_id=context.run.conversation_id,
            run_id=context.run.pk,
        )
    except InvalidSchedule as error:
        raise _refusal(error) from None
    except services.ScheduleLimit as error:
        raise ToolError(error.message) from None
    revision = schedule.revision
    return (
        f"Created schedule {schedule.pk} “{schedule.title}”: {revision.cadence}; "
        f"{_next_run_words(schedule)}. Pinned by the schedule.create policy: {pinned_words(revision)}."
    )


def schedule_update(arguments: UpdateArguments, context: ToolContext) -> str:
    data: dict[str, Any] = arguments.model_dump(exclude={"schedule_id", "time_of_day"}, exclude_none=True)
    try:
        parse_update(data)  # limits and the failure limit are refused first, whatever the schedule
    except LimitsNotUpdatable as error:
        raise _refusal(error) from None
    except InvalidSchedule:
        pass  # reported below, once the schedule is known to be the owner's
    schedule = (
        Schedule.objects.owned_by(context.run.owner)
        .select_related("current_revision")
        .filter(pk=arguments.schedule_id)
        .first()
    )
    if schedule is None:
        raise ToolError(f"there is no schedule {arguments.schedule_id} of yours")
    if arguments.time_of_day is not None:
        data.update(_moved(schedule, arguments.time_of_day))
    try:
        updated = services.update_schedule(
            schedule,
            parse_update(data),
            by=context.run.owner,
            via=services.CHAT,
            conversation_id=context.run.conversation_id,
            run_id=context.run.pk,
        )
    except InvalidSchedule as error:
        raise _refusal(error) from None
    except services.ScheduleCompleted:
        raise ToolError("the schedule has completed and cannot be changed") from None
    revision = updated.revision
    return (
        f"Schedule {updated.pk} “{updated.title}” is now at revision {revision.number}: {revision.cadence}; "
        f"{_next_run_words(updated)}. Its limits and failure limit are unchanged."
    )


def register_schedule_tools() -> None:
    register(
        Tool(
            "schedule.create",
            "Create a one-time (run_at) or recurring (cron + timezone) schedule for this agent. "
            "Limits are set by policy. Unless the owner turned confirmation off, this proposes the "
            "schedule: it is created only when the owner confirms it.",
            CreateArguments,
            schedule_create,
        )
    )
    register(
        Tool(
            "schedule.update",
            "Change a schedule's title, prompt, recurrence, time of day or time zone. Limits and the "
            "failure limit cannot be changed here (only an explicit revision by an admin changes them).",
            UpdateArguments,
            schedule_update,
        )
    )
