"""Executing schedules: materialize due occurrences, then run each one exactly once
(docs/contract.md#schedules).

The tick claims due schedules with SELECT ... FOR UPDATE SKIP LOCKED, so several clusters can
tick at once without waiting on each other, and writes each batch in bulk: the occurrences
(unique per schedule and slot, the last guard against a slot running twice), a new conversation
and a queued run per runnable slot with the revision's complete limits, the admission
(a reservation against the owner's ceilings, or a failed `admission_denied` run), and one
django-q2 task per admitted run, enqueued inside the same transaction (ORM broker) or on commit
(any other broker): nothing is enqueued for a rolled-back write, and a queued run already holds
its money.

The occurrence task claims its queued run with a conditional update, so a task delivered twice
runs once. django_q is imported only by schedules/tasks.py, which passes `enqueue` in.
"""

from __future__ import annotations

import logging
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from accounting import ledger
from accounting.selectors import cost_this_month, owner_timezone
from runs import services as run_services
from runs import titles
from runs.limits import InvalidLimits, RunLimits, validate_limits
from runs.models import Agent, Conversation, Run, TranscriptEntry
from runs.runtime import execute_run
from schedules import bulk, recurrence
from schedules.forecast import table as forecast_table
from schedules.models import Occurrence, Schedule, ScheduleRevision
from schedules.notices import capped as capped_notice
from schedules.services import complete_schedules, pause_for_invalid_definition

logger = logging.getLogger(__name__)

Enqueue = Callable[[list[int]], None]  # occurrence ids; writes their tasks
# After long downtime only the newest slot can run; this many older ones are recorded as missed.
MAX_MISSED_RECORDED = 100


class InvalidDefinition(Exception):
    """A schedule that cannot be materialized; the message is sanitized (no prompt, no content)."""


@dataclass
class TickReport:
    enqueued: list[int] = field(default_factory=list)
    missed: int = 0
    skipped: int = 0
    refused: int = 0
    paused: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"{len(self.enqueued)} enqueued, {self.refused} refused admission, {self.missed} missed, "
            f"{self.skipped} skipped, {len(self.paused)} paused as invalid"
        )


def grace() -> timedelta:
    return timedelta(seconds=settings.SCHEDULE_GRACE_SECONDS)


def materialize_due(
    *,
    enqueue: Enqueue,
    now: datetime | None = None,
    batch: int | None = None,
    progress: Callable[[TickReport], None] | None = None,
) -> TickReport:
    """Materialize every due schedule once. Idempotent and safe to run from several clusters.

    Each batch is one transaction. A schedule whose definition cannot be materialized is paused
    with its reason and the others go ahead; if the batch's writes fail anyway, they are retried
    one schedule at a time, each in a savepoint, so only the culprit is paused.
    """
    now = now or timezone.now()
    batch = batch or settings.SCHEDULE_TICK_BATCH
    report = TickReport()
    # Time passing moves the forecast's inputs: owners whose day ended get the new day's fires.
    forecast_table.move_on_due(now)
    unpausable: list[int] = []
    while True:
        with transaction.atomic():
            due = _claim_due(now, batch, unpausable)
            in_flight = set(
                Occurrence.objects.filter(
                    schedule_id__in=[s.pk for s in due],
                    outcome__in=[Occurrence.Outcome.PENDING, Occurrence.Outcome.RUNNING],
                ).values_list("schedule_id", flat=True)
            )
            plans: list[_Plan] = []
            broken: list[tuple[Schedule, str]] = []
            for schedule in due:
                try:
                    plans.append(_plan(schedule, now=now, in_flight=schedule.pk in in_flight))
                except InvalidDefinition as exc:
                    broken.append((schedule, str(exc)))
                except Exception as exc:  # one poison schedule must not stop the tick
                    logger.exception("planning schedule %s failed", schedule.pk)
                    broken.append((schedule, f"internal error ({type(exc).__name__})"))
            _skip_over_cap(plans, now=now)
            try:
                with transaction.atomic():
                    _write(plans, now=now, enqueue=enqueue, report=report)
            except Exception:
                logger.exception(
                    "materializing a batch of %d schedules failed; retrying one by one", len(plans)
                )
                for plan in plans:
                    try:
                        with transaction.atomic():
                            _write([plan], now=now, enqueue=enqueue, report=report)
                    except Exception as exc:
                        logger.exception("materializing schedule %s failed", plan.schedule.pk)
                        broken.append((plan.schedule, f"internal error ({type(exc).__name__})"))
            for schedule, detail in broken:
                try:
                    with transaction.atomic():
                        pause_for_invalid_definition(schedule, detail=detail, now=now)
                    report.paused.append(schedule.pk)
                except Exception:
                    logger.exception("pausing broken schedule %s failed", schedule.pk)
                    unpausable.append(schedule.pk)
        if progress is not None:
            progress(report)
        if len(due) < batch:
            return report


def _claim_due(now: datetime, batch: int, excluded: list[int]) -> list[Schedule]:
    """Lock up to `batch` due schedules that no other tick holds, then read their revisions.

    The bare rows are locked: a join in the locking query would be rechecked, for a schedule
    edited since our snapshot, against its old revision and come back without one."""
    due = list(
        Schedule.objects.due(now)
        .exclude(pk__in=excluded)
        .select_for_update(skip_locked=True)
        .order_by("next_occurrence_at", "id")[:batch]
    )
    revisions = ScheduleRevision.objects.in_bulk(
        [s.current_revision_id for s in due if s.current_revision_id]
    )
    agents = Agent.objects.in_bulk({r.agent_id for r in revisions.values()})  # a few, shared by many
    for revision in revisions.values():
        revision.agent = agents[revision.agent_id]
    for schedule in due:
        schedule.current_revision = revisions.get(schedule.current_revision_id or 0)
    return due


@dataclass
class _Plan:
    """What the tick will write for one due schedule (computed before any write)."""

    schedule: Schedule
    missed: list[datetime]
    run_slot: datetime | None  # the newest due slot, if within its grace window
    skip: str  # why that slot is skipped (Occurrence.SkipReason), or "" when it runs
    following: datetime | None
    max_cost: Decimal  # what admission reserves


def _check_definition(schedule: Schedule) -> RunLimits:
    """The schedule's pinned limits, if it can be run as defined; else InvalidDefinition."""
    revision = schedule.current_revision
    if revision is None:
        raise InvalidDefinition("the schedule has no revision")
    if not revision.agent.is_active:
        raise InvalidDefinition(f"its agent {revision.agent.name!r} is retired")
    try:
        limits = validate_limits(revision.limits, stored=True)
    except InvalidLimits as exc:
        raise InvalidDefinition(f"its pinned limits no longer validate: {exc}") from None
    try:
        recurrence.parse_timezone(revision.timezone)
        if schedule.kind == Schedule.Kind.RECURRING:
            recurrence.parse_cron(revision.cron)
    except recurrence.InvalidRecurrence as exc:
        raise InvalidDefinition(str(exc)) from None
    return limits


def _plan(schedule: Schedule, *, now: datetime, in_flight: bool) -> _Plan:
    limits = _check_definition(schedule)
    revision = schedule.revision
    first = schedule.next_occurrence_at
    assert first is not None
    if schedule.kind == Schedule.Kind.ONE_TIME:
        slots, following = [first], None
    else:
        cron = recurrence.parse_cron(revision.cron)
        zone = recurrence.parse_timezone(revision.timezone)
        # next_occurrence_at is itself a slot; start just before it so it is included.
        slots = recurrence.slots_between(cron, zone, first - timedelta(microseconds=1), now)
        if not slots:  # the definition changed since: its stored slot is no longer one of the cron's
            slots = [first]
        following = recurrence.next_slot(cron, zone, max(now, slots[-1]))
        if following is None:
            raise InvalidDefinition(f"cron {cron.expression!r} never fires again")
    newest = slots[-1]
    # No catch-up storm: only the newest slot may run, and only within its grace window.
    late = now - newest > grace()
    return _Plan(
        schedule=schedule,
        missed=slots if late else slots[:-1],
        run_slot=None if late else newest,
        skip=Occurrence.SkipReason.OVERLAP if in_flight else "",
        following=following,
        max_cost=limits.max_cost,
    )


@dataclass(frozen=True)
class _Slot:
    """A runnable slot as written: its occurrence and its queued run."""

    occurrence_id: int
    run_id: int
    owner_id: int
    max_cost: Decimal


def _write(plans: list[_Plan], *, now: datetime, enqueue: Enqueue, report: TickReport) -> None:
    """The batch's writes: occurrences (missed, skipped, and one per runnable slot with a new
    conversation, a queued run with the revision's complete limits and its prompt), admission
    (reservations), tasks, and the schedules' next slots. `report` changes only on success."""
    slots = _insert(plans)
    # Admission: a reservation each, or a failed `admission_denied` run counted like any failure.
    admitted = run_services.admit_runs(
        [ledger.ReservationRequest(s.owner_id, s.run_id, s.max_cost) for s in slots], now=now
    )
    enqueued = [s.occurrence_id for s in slots if s.run_id in admitted]
    enqueue(enqueued)
    _set_column(Schedule, "next_occurrence_at", {p.schedule.pk: p.following for p in plans})
    one_time = [p for p in plans if p.schedule.kind == Schedule.Kind.ONE_TIME]
    missed = [p.schedule for p in one_time if p.run_slot is None]
    capped = [p.schedule for p in one_time if p.skip == Occurrence.SkipReason.MONTHLY_CAP]
    complete_schedules(missed, now=now, detail="its only slot was missed")
    complete_schedules(capped, now=now, detail="its only slot was skipped at its monthly cap")
    # A one-time schedule fired has no runs left to forecast: it leaves the forecast here, one lock
    # per owner for the batch, so that its run's end (which completes it) has nothing to write there.
    ended = {s.pk for s in missed + capped}
    forecast_table.sync([p.schedule.pk for p in one_time if p.schedule.pk not in ended], now=now)
    report.enqueued += enqueued
    report.missed += sum(len(p.missed) for p in plans)
    report.skipped += sum(1 for p in plans if p.run_slot is not None and p.skip)
    _tell_capped(plans, now=now)
    report.refused += len(slots) - len(admitted)


def _skip_over_cap(plans: list[_Plan], *, now: datetime) -> None:
    """A slot that would take its schedule's spend this month (owner's zone) plus its `max_cost`
    strictly above the revision's monthly cap is skipped, `monthly_cap`
    (docs/contract.md#monthly-cap-per-schedule).
    No reservation of the schedule's is open here: one in flight makes the slot an overlap skip, and
    the tick holds the schedule's row. One query per owner with capped schedules due."""
    capped = [p for p in plans if p.run_slot is not None and not p.skip and p.schedule.revision.monthly_cap]
    by_owner: dict[int, list[_Plan]] = {}
    for plan in capped:
        by_owner.setdefault(plan.schedule.owner_id, []).append(plan)
    for owner_id, owned in by_owner.items():
        spent = cost_this_month(owner_id, [p.schedule.pk for p in owned], owner_timezone(owner_id), now=now)
        for plan in owned:
            cap = plan.schedule.revision.monthly_cap
            assert cap is not None
            if spent.get(plan.schedule.pk, Decimal(0)) + plan.max_cost > cap:
                plan.skip = Occurrence.SkipReason.MONTHLY_CAP


def _tell_capped(plans: list[_Plan], *, now: datetime) -> None:
    """The month's first monthly-cap skip of each schedule is told (schedules.notices.capped): the
    batch's skipped occurrences read in one query, not one per schedule."""
    capped = {p.schedule.pk: p for p in plans if p.skip == Occurrence.SkipReason.MONTHLY_CAP}
    if not capped:
        return
    skipped = Occurrence.objects.filter(
        schedule_id__in=list(capped), skip_reason=Occurrence.SkipReason.MONTHLY_CAP
    ).filter(scheduled_for__in={p.run_slot for p in capped.values()})
    for occurrence in skipped.select_related("revision"):
        if occurrence.scheduled_for == capped[occurrence.schedule_id].run_slot:
            capped_notice.queue(
                occurrence, owner_id=capped[occurrence.schedule_id].schedule.owner_id, now=now
            )


def _runnable(plans: list[_Plan]) -> list[tuple[_Plan, datetime]]:
    return [(p, slot) for p in plans if (slot := p.run_slot) is not None and not p.skip]


def _not_run(plans: list[_Plan]) -> list[tuple[_Plan, datetime, str]]:
    """The slots recorded without a run, with why one was skipped: missed ones (no reason), and one
    skipped while a run is in flight or at the monthly cap."""
    missed = [(p, slot, "") for p in plans for slot in p.missed[-MAX_MISSED_RECORDED:]]
    skipped = [(p, p.run_slot, p.skip) for p in plans if p.run_slot is not None and p.skip]
    return [*missed, *skipped]


def _metadata(schedule: Schedule, occurrence_id: int, slot: datetime) -> dict[str, Any]:
    """What a scheduled run's conversation says about its provenance (docs/contract.md#vocabulary)."""
    return {
        "schedule_id": schedule.pk,
        "occurrence_id": occurrence_id,
        "scheduled_for": slot.isoformat(),
        "revision": schedule.revision.number,
    }


def _insert(plans: list[_Plan]) -> list[_Slot]:
    """Ids allocated up front, then every row of the batch in one statement (schedules.bulk)."""
    runnable = _runnable(plans)
    created = timezone.now()  # when the rows are written (`now` may be a tick's notional time)
    occurrence_ids = bulk.allocate_ids(Occurrence, len(runnable))
    conversation_ids = bulk.allocate_ids(Conversation, len(runnable))
    run_ids = bulk.allocate_ids(Run, len(runnable))
    revisions = [p.schedule.revision for p, _ in runnable]
    occurrences = bulk.Rows(
        Occurrence,
        {
            "id": occurrence_ids,
            "schedule_id": [p.schedule.pk for p, _ in runnable],
            "scheduled_for": [slot for _, slot in runnable],
            "revision_id": [r.pk for r in revisions],
            "run_id": run_ids,
            "created_at": [created] * len(runnable),
        },
    )
    not_run = _not_run(plans)
    recorded = bulk.Rows(
        Occurrence,
        {
            "schedule_id": [p.schedule.pk for p, _, _ in not_run],
            "scheduled_for": [slot for _, slot, _ in not_run],
            "revision_id": [p.schedule.revision.pk for p, _, _ in not_run],
            "outcome": [
                Occurrence.Outcome.SKIPPED if why else Occurrence.Outcome.MISSED for _, _, why in not_run
            ],
            "skip_reason": [why for _, _, why in not_run],
            "created_at": [created] * len(not_run),
        },
    )
    conversations = bulk.Rows(
        Conversation,
        {
            "id": conversation_ids,
            "owner_id": [p.schedule.owner_id for p, _ in runnable],
            "title": [_conversation_title(p.schedule.revision, slot) for p, slot in runnable],
            "metadata": [
                _metadata(p.schedule, i, slot) for (p, slot), i in zip(runnable, occurrence_ids, strict=True)
            ],
            "created_at": [created] * len(runnable),
            "last_activity_at": [created] * len(runnable),
        },
    )
    runs = bulk.Rows(
        Run,
        {
            "id": run_ids,
            "owner_id": [p.schedule.owner_id for p, _ in runnable],
            "conversation_id": conversation_ids,
            "agent_id": [r.agent_id for r in revisions],
            "prompt": [r.prompt for r in revisions],
            "limits": [r.limits for r in revisions],  # the complete pinned value, whatever fields it has
            "created_at": [created] * len(runnable),
        },
    )
    prompts = bulk.Rows(
        TranscriptEntry,
        {
            "run_id": run_ids,
            "seq": [0] * len(runnable),
            "role": [TranscriptEntry.Role.USER] * len(runnable),
            "content": [r.prompt for r in revisions],
            "created_at": [created] * len(runnable),
        },
    )
    ctes = [bulk.insert_cte("m", recorded)] if not_run else []
    if runnable:
        ctes += [
            bulk.insert_cte("o", occurrences),
            bulk.insert_cte("c", conversations),
            bulk.insert_cte("r", runs),
            bulk.insert_cte("t", prompts),
        ]
    if ctes:
        bulk.insert_all(*ctes)
    return [
        _Slot(occurrence_id, run_id, p.schedule.owner_id, p.max_cost)
        for (p, _), occurrence_id, run_id in zip(runnable, occurrence_ids, run_ids, strict=True)
    ]


def _set_column(model: type[models.Model], field_name: str, values: dict[int, Any]) -> None:
    """UPDATE one column of many rows to per-row values in one statement: an UPDATE ... FROM
    unnest(), much cheaper than the CASE expression bulk_update builds."""
    if not values:
        return
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.Field)
    table, column, db_type = model._meta.db_table, field.column, field.db_type(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "{column}" = v.value '  # noqa: S608 - identifiers from model metadata
            f'FROM unnest(%s::bigint[], %s::{db_type}[]) AS v(id, value) WHERE "{table}".id = v.id',
            [list(values), list(values.values())],
        )


def _conversation_title(revision: ScheduleRevision, slot: datetime) -> str:
    """ "Morning briefing — 3 Sep 2026": the schedule and the local date, within the column by
    construction (counted in code points, cut at a cluster boundary: runs.titles)."""
    local = slot.astimezone(zoneinfo.ZoneInfo(revision.timezone))
    suffix = f" — {local:%-d %b %Y}"
    limit = Conversation._meta.get_field("title").max_length or 200
    return titles.fit(revision.title, limit - len(suffix)) + suffix


# -- the occurrence task ------------------------------------------------------------------------


def execute_occurrence(
    occurrence_id: int, *, client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep
) -> Run | None:
    """Claim the occurrence's queued run and drive it to its end. Idempotent: a task delivered
    twice, or one for an occurrence refused, cancelled or already running, does nothing."""
    with transaction.atomic():
        occurrence = (
            Occurrence.objects.select_related("run", "run__agent", "run__conversation")
            .filter(pk=occurrence_id)
            .first()
        )
        if occurrence is None or occurrence.run is None or occurrence.outcome != Occurrence.Outcome.PENDING:
            return None
        attempt = run_services.claim_run(occurrence.run)
        if attempt is None:
            return None
        mark_occurrence_running(occurrence_id, attempt)
    # The grace window was applied when the slot was found; a task that waited in a busy queue
    # still runs, late, rather than losing the owner's briefing.
    return execute_run(occurrence.run, client=client, sleep=sleep)


def mark_occurrence_running(occurrence_id: int, attempt: Any) -> None:
    """In the transaction that claimed its run (here, or runs.inflight through `run_claimed`)."""
    Occurrence.objects.filter(pk=occurrence_id, outcome=Occurrence.Outcome.PENDING).update(
        outcome=Occurrence.Outcome.RUNNING, attempt=attempt, claimed_at=timezone.now()
    )


@dataclass(frozen=True)
class QueuedTasks:
    """What the task queue still holds: occurrences and interactive runs waiting for a worker."""

    occurrences: frozenset[int]
    runs: frozenset[int]


def reap(*, now: datetime | None = None, queued_tasks: Callable[[], QueuedTasks] | None = None) -> list[int]:
    """Fail runs whose worker died, or whose task was lost before any worker took it, with
    `worker_lost`; each counts like any failure and releases its reservation. Idempotent.
    `queued_tasks` reads what is still in the queue (only when some run waited suspiciously
    long): a run behind a backlog is left alone, scheduled or interactive."""

    def still_waiting(queued: list[Run]) -> set[int]:
        # A task in the queue claims the fairest queued runs, and a run in flight claims the next
        # as it ends (runs.inflight): a long-queued run is lost only when nothing is left that
        # would ever claim it, no task and no live run anywhere.
        if queued_tasks is None:
            return set()
        waiting = queued_tasks()
        alive = Run.objects.filter(
            status=Run.Status.RUNNING,
            heartbeat_at__gte=(now or timezone.now()) - timedelta(seconds=settings.RUN_LEASE_SECONDS),
        )
        if waiting.occurrences or waiting.runs or alive.exists():
            return {run.pk for run in queued}
        return set()

    return run_services.fail_lost_runs(now=now, still_waiting=still_waiting)
