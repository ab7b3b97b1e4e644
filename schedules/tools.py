"""schedule.create and schedule.update as chat tools. They call the same services as the
dashboard and the API; the agent can never pass limits (ADR-0109 decision 4)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runs.tools import Tool, ToolContext, ToolError, register
from schedules import services
from schedules.models import Schedule
from schedules.schemas import NOT_UPDATABLE, InvalidSchedule, parse_create, parse_update


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


def _refusal(error: InvalidSchedule) -> ToolError:
    return ToolError("; ".join(f"{field}: {message}" for field, message in error.fields.items()))


def schedule_create(arguments: CreateArguments, context: ToolContext) -> str:
    data: dict[str, Any] = arguments.model_dump(exclude_none=True)
    limits = sorted(key for key in data if key in NOT_UPDATABLE)
    if limits:
        raise ToolError(
            f"{', '.join(limits)}: limits are pinned by the schedule.create policy and cannot be given"
        )
    try:
        schedule = services.create_schedule(
            context.run.owner, parse_create({**data, "agent": context.agent.name}), via="chat"
        )
    except InvalidSchedule as error:
        raise _refusal(error) from None
    revision = schedule.revision
    return (
        f"Created schedule {schedule.pk} '{schedule.title}' ({revision.cadence}); next run "
        f"{schedule.next_occurrence_at:%Y-%m-%d %H:%M} UTC; "
        f"budget USD {revision.limits['max_cost']} per run; "
        f"pauses after {revision.max_consecutive_failures} consecutive failures."
    )


def schedule_update(arguments: UpdateArguments, context: ToolContext) -> str:
    schedule = Schedule.objects.owned_by(context.run.owner).filter(pk=arguments.schedule_id).first()
    if schedule is None:
        raise ToolError(f"there is no schedule {arguments.schedule_id} of yours")
    try:
        changes = parse_update(arguments.model_dump(exclude={"schedule_id"}, exclude_none=True))
        updated = services.update_schedule(schedule, changes, by=context.run.owner, via="chat")
    except InvalidSchedule as error:
        raise _refusal(error) from None
    except services.ScheduleCompleted:
        raise ToolError("the schedule has completed and cannot be changed") from None
    return f"Schedule {updated.pk} is now at revision {updated.revision.number}: {updated.revision.cadence}."


def register_schedule_tools() -> None:
    register(
        Tool(
            "schedule.create",
            "Create a one-time (run_at) or recurring (cron + timezone) schedule for this agent. "
            "Limits are set by policy.",
            CreateArguments,
            schedule_create,
        )
    )
    register(
        Tool(
            "schedule.update",
            "Change a schedule's title, prompt, recurrence or time zone. Limits cannot be changed here.",
            UpdateArguments,
            schedule_update,
        )
    )
