"""Pydantic bodies for schedule writes, shared by the dashboard forms, the chat tools and the API.

Per-field rules live here; rules that need the database or the clock (the agent exists, `run_at`
is ahead) live in the services, which report them in the same {field: message} shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, TypeVar

from django.conf import settings
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator

from accounting.money import format_money, parse_money
from accounting.timezones import is_time_zone
from runs.limits import LIMIT_FIELDS, InvalidFields, RunLimits, parse
from schedules import recurrence

MAX_FAILURE_LIMIT = 100
T = TypeVar("T", bound=BaseModel)


class InvalidSchedule(InvalidFields):
    """A schedule write that was refused; `fields` maps each field to a plain message."""

    code = "invalid"


class LimitsNotUpdatable(InvalidSchedule):
    """schedule.update may not touch limits or the failure limit (docs/decisions/0002, point 4)."""

    code = "limits_not_updatable"


NOT_UPDATABLE = frozenset({*LIMIT_FIELDS, "limits", "max_consecutive_failures", "consecutive_failures"})
NOT_UPDATABLE_MESSAGE = (
    "{field} cannot be changed by schedule.update: limits and the failure limit change only through an "
    "explicit revision by an authorized admin or API client"
)


def _storable(value: str | None) -> str | None:
    """Text the database can store: no NUL character, no unpaired surrogate."""
    if value is not None:
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be valid Unicode text (it has an unpaired surrogate)") from None
    return value


def _check_prompt(value: str) -> str:
    if len(value) > settings.SCHEDULE_MAX_PROMPT_CHARS:
        raise ValueError(f"prompt must be at most {settings.SCHEDULE_MAX_PROMPT_CHARS} characters")
    return value


def _check_timezone(value: str | None) -> str | None:
    if value is not None and not is_time_zone(value):
        raise ValueError(f"{value[:64]!r} is not an IANA time zone (for example Europe/Riga)")
    return value


def _check_cron(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return recurrence.parse_cron(value).expression
    except recurrence.InvalidRecurrence as exc:
        raise ValueError(str(exc)) from None


class ScheduleCreate(BaseModel):
    """Either `run_at` (one-time) or `cron` + `timezone` (recurring). Limits are never given:
    the schedule.create policy pins them."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    title: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1)
    agent: str = Field(min_length=1, max_length=64)
    run_at: AwareDatetime | None = None
    cron: str | None = Field(default=None, max_length=120)
    timezone: str | None = Field(default=None, max_length=64)

    _prompt = field_validator("prompt")(_check_prompt)
    _text = field_validator("title", "prompt", "agent", "cron", "timezone")(_storable)
    _timezone = field_validator("timezone")(_check_timezone)
    _cron = field_validator("cron")(_check_cron)


class ScheduleUpdate(BaseModel):
    """schedule.update: title, prompt, recurrence and time zone; nothing else."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    title: str | None = Field(default=None, min_length=1, max_length=200)
    prompt: str | None = Field(default=None, min_length=1)
    run_at: AwareDatetime | None = None
    cron: str | None = Field(default=None, max_length=120)
    timezone: str | None = Field(default=None, max_length=64)

    _prompt = field_validator("prompt")(lambda v: v if v is None else _check_prompt(v))
    _text = field_validator("title", "prompt", "cron", "timezone")(_storable)
    _timezone = field_validator("timezone")(_check_timezone)
    _cron = field_validator("cron")(_check_cron)

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


def _check_monthly_cap(value: Any) -> Decimal | None:
    """USD as a decimal string (or null: no cap), above 0."""
    if value is None or value == "":
        return None
    cap = parse_money(value, "monthly_cap")
    if cap <= 0:
        raise ValueError("monthly_cap must be above 0, or null for no cap")
    return cap


class ExplicitRevision(BaseModel):
    """An explicit revision: complete limits, the failure limit, the monthly cap (null: none) and a
    required reason. A cap below `max_cost` could never admit a run and is refused."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    limits: RunLimits
    max_consecutive_failures: StrictInt = Field(ge=1, le=MAX_FAILURE_LIMIT)
    monthly_cap: Decimal | None = None
    reason: str = Field(min_length=1, max_length=1000)

    _text = field_validator("reason")(_storable)
    _cap = field_validator("monthly_cap", mode="before")(_check_monthly_cap)

    @field_validator("monthly_cap")
    @classmethod
    def _cap_admits_a_run(cls, cap: Decimal | None, info: ValidationInfo) -> Decimal | None:
        limits = info.data.get("limits")
        if cap is not None and limits is not None and cap < limits.max_cost:
            raise ValueError(
                f"monthly_cap: USD {format_money(cap)} is below the cost limit of one run "
                f"(USD {format_money(limits.max_cost)}), so it could never admit a run"
            )
        return cap


class RevisionRequestBody(ExplicitRevision):
    """An owner's request for new limits: the same complete shape as an explicit revision (the
    limits and failure limit they suggest, and why), so an admin can pin it as it stands."""


class DeclineBody(BaseModel):
    """Why a revision request is declined; the owner is told these words."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    reason: str = Field(min_length=1, max_length=1000)

    _text = field_validator("reason")(_storable)


class RequestDecision(BaseModel):
    """An admin's decision on a revision request, as the API documents it: `pin` with the final
    limits, failure limit and reason (the explicit revision), or `decline` with a reason.
    `base_revision`, when given, is the revision the decision was reviewed against: a newer one in
    force refuses the pin. parse_decision reads it into a Decision."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    decision: Literal["pin", "decline"]
    reason: str = Field(min_length=1, max_length=1000)
    limits: RunLimits | None = None
    max_consecutive_failures: StrictInt | None = Field(default=None, ge=1, le=MAX_FAILURE_LIMIT)
    monthly_cap: Decimal | None = None
    base_revision: StrictInt | None = Field(default=None, ge=1)

    _text = field_validator("reason")(_storable)
    _cap = field_validator("monthly_cap", mode="before")(_check_monthly_cap)


PIN_FIELDS = ("limits", "max_consecutive_failures", "monthly_cap", "reason")


@dataclass(frozen=True)
class Decision:
    """A decision parsed whole: the explicit revision a pin writes, or the reason of a decline."""

    decided: ExplicitRevision | DeclineBody
    base_revision: int | None


def parse_create(data: Any) -> ScheduleCreate:
    return _parse(ScheduleCreate, data)


def parse_update(data: Any) -> ScheduleUpdate:
    """Refuses limit fields with LimitsNotUpdatable before any other validation."""
    if isinstance(data, dict):
        touched = sorted(key for key in data if key in NOT_UPDATABLE)
        if touched:
            raise LimitsNotUpdatable({key: NOT_UPDATABLE_MESSAGE.format(field=key) for key in touched})
    return _parse(ScheduleUpdate, data)


def parse_explicit(data: Any) -> ExplicitRevision:
    return _parse(ExplicitRevision, data)


def _parse(model: type[T], data: Any) -> T:
    return parse(model, data, InvalidSchedule)


def parse_revision_request(data: Any) -> RevisionRequestBody:
    return _parse(RevisionRequestBody, data)


def parse_decline(data: Any) -> DeclineBody:
    return _parse(DeclineBody, data)


def parse_decision(data: dict[str, Any]) -> Decision:
    """A pin needs the complete limits and the failure limit, and is parsed as the explicit
    revision it writes, by ExplicitRevision itself (so every rule of a pin, the monthly cap against
    max_cost too, is a field error here, before any service runs); a decline takes only its
    reason."""
    decision = _parse(RequestDecision, data)
    if decision.decision == "decline":
        given = {
            name: f"{name} is not taken by a decline, only a reason"
            for name in ("limits", "max_consecutive_failures", "monthly_cap", "base_revision")
            if getattr(decision, name) is not None
        }
        if given:
            raise InvalidSchedule(given)
        return Decision(_parse(DeclineBody, {"reason": data["reason"]}), None)
    missing = {
        name: f"{name} is required to pin"
        for name in ("limits", "max_consecutive_failures")
        if getattr(decision, name) is None
    }
    if missing:
        raise InvalidSchedule(missing)
    pin = _parse(ExplicitRevision, {name: data[name] for name in PIN_FIELDS if name in data})
    return Decision(pin, decision.base_revision)
