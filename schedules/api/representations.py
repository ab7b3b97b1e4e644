"""The JSON representations of docs/contract.md#json-api, as pydantic models, and how each is made from
the rows.

Field names are part of the contract. Money is a decimal string ("5.00"); times are ISO 8601 with
an offset. Request bodies are not here: they are the shared models of schedules.schemas.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from accounting.ledger import BudgetSummary
from accounting.models import AccountingEvent as AccountingEventRow
from accounting.models import BudgetAlert, LedgerEntry
from accounting.money import format_money
from accounting.selectors import TOKEN_KINDS, MonthUsage
from runs.failures import ERROR_CLASS_CHOICES, Reason
from runs.limits import DIMENSIONS, RunLimits
from runs.models import Run as RunRow
from schedules import forecast
from schedules.models import Occurrence as OccurrenceRow
from schedules.models import PauseEvent, ScheduleRevision
from schedules.models import Schedule as ScheduleRow

Money = Annotated[
    str,
    Field(pattern=r"^\d+\.\d{2,6}$", examples=["5.00"], description="USD as a decimal string"),
]


class OneOf:
    """`Annotated[str, OneOf(values)]`: a string from a closed set the domain defines (model
    choices, the failure registry), checked on the way out and listed as the schema's `enum`,
    so the API keeps no copy of any vocabulary."""

    def __init__(self, values: Iterable[str]) -> None:
        self.values = tuple(values)

    def check(self, value: str) -> str:
        if value not in self.values:
            raise ValueError(f"{value!r} is not one of {', '.join(self.values)}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "enum": list(self.values)}


FailureReason = Annotated[str, OneOf(Reason.values)]
ErrorClass = Annotated[str, OneOf(name for name, _ in ERROR_CLASS_CHOICES)]


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors and lists -----------------------------------------------------------------------------


class ErrorDetail(Out):
    code: str = Field(description="snake_case, stable: what went wrong", examples=["not_paused"])
    message: str = Field(description="plain words for a person")
    fields: dict[str, str] = Field(
        description="each invalid field (dotted when nested, e.g. limits.max_cost) and why"
    )


class Error(Out):
    error: ErrorDetail


# -- limits and usage --------------------------------------------------------------------------


class Limits(RunLimits):
    """All the RunLimits fields, as pinned (docs/contract.md#run-limits): the domain's own model,
    documented as it serializes (money as decimal strings), so a field added to RunLimits appears here
    too."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_mode_override="serialization")


class Usage(Out):
    steps: int
    model_calls: int
    tool_calls: int
    cost: Money


class AccountedFailure(Out):
    """The content-free classification of `schedule.run_accounted`: `reason`, `error_class`, and
    only those diagnostics the run recorded (absent keys were not recorded)."""

    model_config = ConfigDict(extra="ignore")

    reason: FailureReason
    error_class: ErrorClass
    provider: str | None = Field(default=None, description="present only when recorded")
    provider_code: str | None = Field(default=None, description="present only when recorded")
    http_status: int | None = Field(default=None, description="present only when recorded")
    provider_parameter: str | None = Field(default=None, description="present only when recorded")


# -- schedules ---------------------------------------------------------------------------------


class Revision(Out):
    number: int
    created_at: datetime
    path: Annotated[str, OneOf(ScheduleRevision.Path.values)]
    created_by: str | None = Field(description="username; null once that user is deleted")
    reason: str
    prompt: str
    cron: str | None
    timezone: str
    run_at: datetime | None
    limits: Limits
    max_consecutive_failures: int
    monthly_cap: Money | None = Field(
        description="USD the schedule may spend in a calendar month; null: none"
    )
    via: str = Field(description="where it came from: chat, dashboard, admin, api, demo")
    conversation_id: int | None = Field(description="chat: the conversation it was asked for in")


class Pause(Out):
    reason: Annotated[str, OneOf(PauseEvent.Reason.values)]
    at: datetime
    by: str | None = Field(description="username of who paused it; null for the system")
    run_id: int | None = Field(description="the run that tripped a failure-limit pause")


class LastRun(Out):
    """The newest accounted run, from its content-free `schedule.run_accounted` event, so it is
    still shown after the run's conversation is deleted."""

    run_id: int | None
    occurrence_id: int | None
    scheduled_for: datetime | None
    revision: int | None
    status: str
    usage: Usage
    failure: AccountedFailure | None
    accounted_at: datetime


class Occurrence(Out):
    id: int
    scheduled_for: datetime
    outcome: Annotated[str, OneOf(OccurrenceRow.Outcome.values)]
    skip_reason: Annotated[str, OneOf(OccurrenceRow.SkipReason.values)] | None = Field(
        description="why a skipped slot did not run: `overlap` (the previous run was in flight) or "
        "`monthly_cap`; null otherwise"
    )
    revision: int = Field(description="the number of the revision in force when it was materialized")
    run_id: int | None = Field(description="null once the run's conversation is deleted")


class Schedule(Out):
    id: int
    title: str
    agent: str
    kind: Annotated[str, OneOf(ScheduleRow.Kind.values)]
    status: Annotated[str, OneOf(ScheduleRow.Status.values)]
    cron: str | None
    timezone: str
    run_at: datetime | None
    pause: Pause | None
    consecutive_failures: int
    max_consecutive_failures: int
    next_occurrence_at: datetime | None
    revision: Revision = Field(description="the current revision")
    last_run: LastRun | None


class Runs(Out):
    """Runs from now to the end of the calendar month (the owner's zone), as the month's simulation
    within the ceilings finds them (docs/contract.md#forecast)."""

    due: int = Field(description="the fires left this month")
    run: int = Field(description="admitted: they fit under the daily and monthly ceilings (and the cap)")
    refused: int = Field(description="refused admission: the daily or the monthly ceiling has no room")
    skipped: int = Field(description="skipped: they would take the schedule past its monthly cap")


class ScheduleMonth(Out):
    """This calendar month (the owner's zone): spent so far, and at month end expected (each run at
    the median cost of its last 20 completed runs) and worst (each at `max_cost`), within the cap and
    the owner's daily and monthly ceilings, with the owner's other schedules."""

    spent: Money
    expected: Money
    worst: Money
    monthly_cap: Money | None
    runs: Runs = Field(description="its runs from now, expected case")
    worst_runs: Runs = Field(description="its runs from now if every run costs its `max_cost`")


class ScheduleDetail(Schedule):
    occurrences: list[Occurrence] = Field(description="the newest occurrences, newest first")
    month: ScheduleMonth


class SchedulePage(Out):
    items: list[Schedule]
    next: str | None = Field(description="absolute URL of the next page; null on the last")


class RevisionPage(Out):
    items: list[Revision]
    next: str | None


class OccurrencePage(Out):
    items: list[Occurrence]
    next: str | None


# -- runs and accounting -------------------------------------------------------------------------


class Synthesis(Out):
    dimension: Annotated[str, OneOf(DIMENSIONS)]
    step: int | None


class RunFailure(Out):
    reason: FailureReason
    error_class: ErrorClass
    transient: bool | None
    provider: str | None
    provider_code: str | None
    http_status: int | None
    provider_parameter: str | None
    message: str = Field(description="the provider's or runtime's words; shown to the owner only")


class Run(Out):
    id: int
    kind: Annotated[str, OneOf(RunRow.Kind.values)]
    status: Annotated[str, OneOf(RunRow.Status.values)]
    limits: Limits
    usage: Usage
    synthesis: Synthesis | None = Field(description="which dimension activated synthesis, on which step")
    failure: RunFailure | None
    conversation_id: int
    started_at: datetime | None
    finished_at: datetime | None


class AccountingEvent(Out):
    event: Annotated[str, OneOf(AccountingEventRow.Kind.values)]
    created_at: datetime
    schedule_id: int | None
    occurrence_id: int | None
    scheduled_for: datetime | None
    revision: int | None
    run_id: int | None
    status: str
    usage: Usage
    failure: AccountedFailure | None


class AccountingEventPage(Out):
    items: list[AccountingEvent]
    next: str | None


class Ceilings(Out):
    daily: Money
    monthly: Money


class Spent(Out):
    today: Money
    month: Money


class OpenReservations(Out):
    count: int
    total: Money


class Tokens(Out):
    """Tokens by kind: `input` counts all input (the cache counts are parts of it), `output` all
    output (`reasoning` is part of it)."""

    input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int
    reasoning: int


class CostByKind(Out):
    """USD by kind of token: uncached input, cache reads, cache writes (both lifetimes), output."""

    input: Money
    cache_read: Money
    cache_write: Money
    output: Money


class ModelSpend(Out):
    provider: str
    model: str
    calls: int
    cost: Money
    tokens: Tokens
    cost_by_kind: CostByKind


class MonthSpend(Out):
    """This month's spend (the owner's time zone) by model and by kind of token."""

    cost: Money
    tokens: Tokens
    cost_by_kind: CostByKind
    by_model: list[ModelSpend]


class Crossed(Out):
    period: Annotated[str, OneOf(["day", "month"])]
    threshold: int = Field(description="percent of that period's ceiling")
    at: datetime


class Alerts(Out):
    thresholds: list[int] = Field(description="percentages of the daily and monthly ceilings, ascending")
    crossed: list[Crossed] = Field(description="crossed in the current day and month, highest first")


class AlertThresholds(Out):
    thresholds: list[int]


class StoppedSchedule(Out):
    schedule_id: int
    title: str
    refused: int = Field(description="its runs the ceilings are expected to refuse this month")
    skipped: int = Field(description="its runs its monthly cap is expected to skip this month")


class Forecast(Out):
    """The rest of the month simulated day by day within the ceilings (docs/contract.md#forecast):
    expected (each run at its schedule's median cost) and worst (each at its `max_cost`)."""

    month_expected: Money = Field(description="spent this month + what the schedules are expected to add")
    month_worst: Money = Field(description="spent this month + what they add if every run costs its max_cost")
    ceiling_reached_on: date | None = Field(
        description="the date (owner's zone) on which the expected spend reaches the monthly ceiling: the "
        "day of the last run admitted before it refuses one; null if it does not this month"
    )
    worst_ceiling_reached_on: date | None = Field(description="the same, in the worst case")
    days_left: int = Field(description="days left in the month, today included")
    daily_ceiling_days: int = Field(description="of those, the days on which the daily ceiling refuses a run")
    worst_daily_ceiling_days: int
    runs: Runs = Field(description="every active schedule's runs from now, expected case")
    worst_runs: Runs
    stopped: list[StoppedSchedule] = Field(
        description="the schedules with the most runs refused or skipped (expected case), at most five"
    )
    stopped_schedules: int = Field(description="how many schedules have runs refused or skipped")


class Budget(Out):
    ceilings: Ceilings
    spent: Spent
    open_reservations: OpenReservations
    month: MonthSpend
    alerts: Alerts
    forecast: Forecast


class WorkerRuns(Out):
    worker: str  # "host:pid" of the django-q2 worker process
    host: str  # the host part of it (the worker's WORKER_HOST)
    running: int
    last_heartbeat_at: datetime | None
    lost: bool = Field(description="no heartbeat within the run lease: its runs will fail worker_lost")


class InFlight(Out):
    """Runs in flight (running) and waiting for a worker (queued): the caller's; for an admin,
    everyone's, with the running ones per worker."""

    scope: str  # "owner" or "all"
    running: int
    queued: int
    workers: list[WorkerRuns]


class Call(Out):
    """One provider call of a run, as the ledger recorded it (docs/contract.md#dollars-as-billed)."""

    step: int | None
    at: datetime
    provider: str
    model: str
    tokens: Tokens
    cost: Money = Field(description="what was charged: the provider's reported charge if any, else computed")
    computed_cost: Money | None = Field(description="from the prices used; null on entries from before")
    reported_cost: Money | None = Field(description="what the provider said it charged, when it says")
    prices: str = Field(
        description="where the prices came from: the catalogue and its version, or the agent's own"
    )
    estimated: bool = Field(
        description="the call was cut before its usage arrived: its tokens and cost are an estimate "
        "that never undercounts"
    )


class RunDetail(Run):
    """A run with its provider calls and their tokens in total; while it runs, the answer as it is
    being written."""

    tokens: Tokens
    calls: list[Call]
    answer: str | None = Field(description="the final answer, once the run has completed")
    answer_cut: bool = Field(
        description="the answer reached the agent's maximum output per call and may stop short"
    )
    partial_answer: str | None = Field(
        description="while the run is running: the text its current model call has streamed so far, "
        "refreshed at most once a second; null otherwise"
    )


# -- from rows -----------------------------------------------------------------------------------


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


def _moment(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def limits_of(stored: dict[str, Any]) -> Limits:
    """Stored limits as stored (RunLimits.from_json, the one reader): a delegated child's max_cost
    is what its parent had left, to the micro-dollar, not an amount a person typed."""
    return Limits.from_json(stored)


def revision_of(revision: ScheduleRevision) -> Revision:
    return Revision(
        number=revision.number,
        created_at=revision.created_at,
        path=revision.path,
        created_by=_username(revision.created_by),
        reason=revision.reason,
        prompt=revision.prompt,
        cron=revision.cron or None,
        timezone=revision.timezone,
        run_at=revision.run_at,
        limits=limits_of(revision.limits),
        max_consecutive_failures=revision.max_consecutive_failures,
        monthly_cap=format_money(revision.monthly_cap) if revision.monthly_cap is not None else None,
        via=revision.via,
        conversation_id=revision.conversation_id,
    )


def pause_of(event: PauseEvent | None) -> Pause | None:
    if event is None:
        return None
    return Pause(
        reason=event.reason,
        at=event.created_at,
        by=_username(event.actor),
        run_id=event.run_id,
    )


def _usage(payload: dict[str, Any]) -> Usage:
    usage = payload.get("usage") or {}
    return Usage(
        steps=usage.get("steps", 0),
        model_calls=usage.get("model_calls", 0),
        tool_calls=usage.get("tool_calls", 0),
        cost=usage.get("cost", "0.00"),
    )


def _accounted_failure(payload: dict[str, Any]) -> AccountedFailure | None:
    failure = payload.get("failure")
    # model_validate leaves unrecorded diagnostics unset, so they are left out of the JSON.
    return AccountedFailure.model_validate(failure) if failure else None


def last_run_of(event: AccountingEventRow | None) -> LastRun | None:
    if event is None:
        return None
    payload = event.payload
    return LastRun(
        run_id=event.run_id,
        occurrence_id=payload.get("occurrence_id"),
        scheduled_for=_moment(payload.get("scheduled_for")),
        revision=payload.get("revision"),
        status=payload.get("status", ""),
        usage=_usage(payload),
        failure=_accounted_failure(payload),
        accounted_at=event.created_at,
    )


def _schedule_fields(schedule: ScheduleRow) -> dict[str, Any]:
    revision = schedule.revision
    return {
        "id": schedule.pk,
        "title": schedule.title,
        "agent": revision.agent.name,
        "kind": schedule.kind,
        "status": schedule.status,
        "cron": revision.cron or None,
        "timezone": revision.timezone,
        "run_at": revision.run_at,
        "pause": pause_of(schedule.pause),
        "consecutive_failures": schedule.consecutive_failures,
        "max_consecutive_failures": revision.max_consecutive_failures,
        "next_occurrence_at": schedule.next_occurrence_at,
        "revision": revision_of(revision),
        "last_run": last_run_of(schedule.last_event),
    }


def schedule_of(schedule: ScheduleRow) -> Schedule:
    return Schedule(**_schedule_fields(schedule))


def runs_of(runs: forecast.Runs) -> Runs:
    return Runs(due=runs.due, run=runs.run, refused=runs.refused, skipped=runs.skipped)


def schedule_detail_of(
    schedule: ScheduleRow, occurrences: list[OccurrenceRow], month: forecast.Forecast
) -> ScheduleDetail:
    return ScheduleDetail(
        **_schedule_fields(schedule),
        occurrences=[occurrence_of(o) for o in occurrences],
        month=ScheduleMonth(
            spent=format_money(month.spent),
            expected=format_money(month.expected),
            worst=format_money(month.worst),
            monthly_cap=format_money(month.monthly_cap) if month.monthly_cap is not None else None,
            runs=runs_of(month.runs),
            worst_runs=runs_of(month.worst_runs),
        ),
    )


def occurrence_of(occurrence: OccurrenceRow) -> Occurrence:
    return Occurrence(
        id=occurrence.pk,
        scheduled_for=occurrence.scheduled_for,
        outcome=occurrence.outcome,
        skip_reason=occurrence.skip_reason or None,
        revision=occurrence.revision.number,
        run_id=occurrence.run_id,
    )


def run_of(run: RunRow) -> Run:
    failure = None
    if run.status == RunRow.Status.FAILED:
        failure = RunFailure(
            reason=run.failure_reason,
            error_class=run.error_class,
            transient=run.transient,
            provider=run.provider or None,
            provider_code=run.provider_code or None,
            http_status=run.http_status,
            provider_parameter=run.provider_parameter or None,
            message=run.failure_message,
        )
    synthesis = None
    if run.synthesis_dimension:
        synthesis = Synthesis(
            dimension=run.synthesis_dimension,
            step=run.synthesis_step,
        )
    return Run(
        id=run.pk,
        kind=run.kind,
        status=run.status,
        limits=limits_of(run.limits),
        usage=Usage(
            steps=run.steps,
            model_calls=run.model_calls,
            tool_calls=run.tool_calls,
            cost=format_money(run.cost),
        ),
        synthesis=synthesis,
        failure=failure,
        conversation_id=run.conversation_id,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


def accounting_event_of(event: AccountingEventRow) -> AccountingEvent:
    payload = event.payload
    return AccountingEvent(
        event=event.event,
        created_at=event.created_at,
        schedule_id=event.schedule_id,
        occurrence_id=payload.get("occurrence_id"),
        scheduled_for=_moment(payload.get("scheduled_for")),
        revision=payload.get("revision"),
        run_id=event.run_id,
        status=payload.get("status", ""),
        usage=_usage(payload),
        failure=_accounted_failure(payload),
    )


def _tokens(values: dict[str, int]) -> Tokens:
    return Tokens(**values)


def _cost_by_kind(values: dict[str, Decimal]) -> CostByKind:
    return CostByKind(**{kind: format_money(amount) for kind, amount in values.items()})


def budget_of(
    summary: BudgetSummary,
    month: MonthUsage,
    *,
    thresholds: list[int],
    crossed: list[BudgetAlert],
    coming: forecast.MonthForecast,
) -> Budget:
    return Budget(
        alerts=Alerts(
            thresholds=thresholds,
            crossed=[Crossed(period=a.period, threshold=a.threshold, at=a.created_at) for a in crossed],
        ),
        forecast=Forecast(
            month_expected=format_money(coming.expected),
            month_worst=format_money(coming.worst),
            ceiling_reached_on=coming.ceiling_reached_on,
            worst_ceiling_reached_on=coming.worst_reached_on,
            days_left=coming.days_left,
            daily_ceiling_days=coming.daily_days,
            worst_daily_ceiling_days=coming.worst_daily_days,
            runs=runs_of(coming.runs),
            worst_runs=runs_of(coming.worst_runs),
            stopped=[
                StoppedSchedule(
                    schedule_id=s.schedule.pk, title=s.schedule.title, refused=s.refused, skipped=s.skipped
                )
                for s in coming.stopped
            ],
            stopped_schedules=coming.stopped_count,
        ),
        ceilings=Ceilings(
            daily=format_money(summary.daily_ceiling), monthly=format_money(summary.monthly_ceiling)
        ),
        spent=Spent(today=format_money(summary.spent_today), month=format_money(summary.spent_month)),
        open_reservations=OpenReservations(count=summary.open_count, total=format_money(summary.open_total)),
        month=MonthSpend(
            cost=format_money(month.cost),
            tokens=_tokens(month.tokens),
            cost_by_kind=_cost_by_kind(month.cost_by_kind),
            by_model=[
                ModelSpend(
                    provider=m.provider,
                    model=m.model,
                    calls=m.calls,
                    cost=format_money(m.cost),
                    tokens=_tokens(m.tokens),
                    cost_by_kind=_cost_by_kind(m.cost_by_kind),
                )
                for m in month.models
            ],
        ),
    )


def call_of(entry: LedgerEntry) -> Call:
    return Call(
        step=entry.step,
        at=entry.created_at,
        provider=entry.provider,
        model=entry.model,
        tokens=_tokens({kind: getattr(entry, f"{kind}_tokens") for kind in TOKEN_KINDS}),
        cost=format_money(entry.cost),
        computed_cost=format_money(entry.computed_cost) if entry.computed_cost is not None else None,
        reported_cost=format_money(entry.reported_cost) if entry.reported_cost is not None else None,
        prices=str(entry.prices.get("source", "")) or "recorded before prices by kind",
        estimated=entry.estimated,
    )


def run_detail_of(run: RunRow, calls: list[LedgerEntry]) -> RunDetail:
    details = [call_of(entry) for entry in calls]
    totals = {kind: sum(getattr(c.tokens, kind) for c in details) for kind in Tokens.model_fields}
    running = run.status == RunRow.Status.RUNNING
    return RunDetail(
        **dict(run_of(run)),
        tokens=Tokens(**totals),
        calls=details,
        answer=run.answer if run.status == RunRow.Status.COMPLETED else None,
        answer_cut=run.answer_cut,
        partial_answer=run.partial_text if running else None,
    )
