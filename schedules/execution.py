"""Executing schedules: materialize due occurrences, then run each one exactly once (SPEC §5).

The tick claims due schedules with SELECT ... FOR UPDATE SKIP LOCKED, so several clusters can
tick at once without waiting on each other; the unique (schedule, scheduled_for) key is the last
guard against a slot being inserted twice. Enqueueing happens inside the same transaction (ORM
broker) or on commit (any other broker): an occurrence is never enqueued for a rolled-back write.

The occurrence task claims its occurrence with a conditional update, so a task delivered twice
runs once. django_q is imported only by schedules/tasks.py, which passes `enqueue` in.
"""

from __future__ import annotations

import logging
import time
import uuid
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounting import ledger
from runs import services as run_services
from runs.failures import AdmissionDenied, Outcome
from runs.limits import InvalidLimits, validate_limits
from runs.models import Conversation, Run
from runs.runtime import execute_run
from schedules import recurrence
from schedules.models import Occurrence, Schedule
from schedules.services import pause_for_invalid_definition

logger = logging.getLogger(__name__)

Enqueue = Callable[[int], None]
# After long downtime only the newest slot can run; this many older ones are recorded as missed.
MAX_MISSED_RECORDED = 100


class InvalidDefinition(Exception):
    """A schedule that cannot be materialized; the message is sanitized (no prompt, no content)."""


@dataclass
class TickReport:
    enqueued: list[int] = field(default_factory=list)
    missed: int = 0
    skipped: int = 0
    paused: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"{len(self.enqueued)} enqueued, {self.missed} missed, {self.skipped} skipped, "
            f"{len(self.paused)} paused as invalid"
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

    Each batch is one transaction; each schedule in it gets a savepoint, so a broken schedule is
    rolled back alone and paused with its reason while the others go ahead.
    """
    now = now or timezone.now()
    batch = batch or settings.SCHEDULE_TICK_BATCH
    report = TickReport()
    unpausable: list[int] = []
    while True:
        with transaction.atomic():
            due = list(
                Schedule.objects.due(now)
                .exclude(pk__in=unpausable)
                .select_for_update(skip_locked=True, of=("self",))
                .select_related("current_revision", "current_revision__agent")
                .order_by("next_occurrence_at", "id")[:batch]
            )
            for schedule in due:
                try:
                    with transaction.atomic():
                        _materialize_one(schedule, now=now, enqueue=enqueue, report=report)
                except Exception as exc:  # one poison schedule must not stop the tick
                    detail = (
                        str(exc)
                        if isinstance(exc, InvalidDefinition)
                        else f"internal error ({type(exc).__name__})"
                    )
                    if not isinstance(exc, InvalidDefinition):
                        logger.exception("materializing schedule %s failed", schedule.pk)
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


def _check_definition(schedule: Schedule) -> None:
    revision = schedule.current_revision
    if revision is None:
        raise InvalidDefinition("the schedule has no revision")
    if not revision.agent.is_active:
        raise InvalidDefinition(f"its agent {revision.agent.name!r} is retired")
    try:
        validate_limits(revision.limits)
    except InvalidLimits as exc:
        raise InvalidDefinition(f"its pinned limits no longer validate: {exc}") from None
    try:
        recurrence.parse_timezone(revision.timezone)
        if schedule.kind == Schedule.Kind.RECURRING:
            recurrence.parse_cron(revision.cron)
    except recurrence.InvalidRecurrence as exc:
        raise InvalidDefinition(str(exc)) from None


def _due_slots(schedule: Schedule, now: datetime) -> tuple[list[datetime], datetime | None]:
    """(every due slot, oldest first; the next slot after them) from next_occurrence_at to now."""
    revision = schedule.revision
    first = schedule.next_occurrence_at
    assert first is not None
    if schedule.kind == Schedule.Kind.ONE_TIME:
        return [first], None
    cron = recurrence.parse_cron(revision.cron)
    zone = recurrence.parse_timezone(revision.timezone)
    # next_occurrence_at is itself a slot; start just before it so it is included.
    slots = recurrence.slots_between(cron, zone, first - timedelta(microseconds=1), now)
    if not slots:  # a definition edited since: its stored slot is no longer a slot of the cron
        slots = [first]
    following = recurrence.next_slot(cron, zone, max(now, slots[-1]))
    if following is None:
        raise InvalidDefinition(f"cron {cron.expression!r} never fires again")
    return slots, following


def _materialize_one(schedule: Schedule, *, now: datetime, enqueue: Enqueue, report: TickReport) -> None:
    _check_definition(schedule)
    slots, following = _due_slots(schedule, now)
    newest = slots[-1]
    revision = schedule.revision
    # No catch-up storm: only the newest slot may run, and only within its grace window.
    late = now - newest > grace()
    missed = slots if late else slots[:-1]
    rows = [
        Occurrence(
            schedule=schedule, scheduled_for=slot, revision=revision, outcome=Occurrence.Outcome.MISSED
        )
        for slot in missed[-MAX_MISSED_RECORDED:]
    ]
    Occurrence.objects.bulk_create(rows, ignore_conflicts=True)
    report.missed += len(missed)
    if not late:
        in_flight = schedule.occurrences.filter(
            outcome__in=[Occurrence.Outcome.PENDING, Occurrence.Outcome.RUNNING]
        ).exists()
        outcome = Occurrence.Outcome.SKIPPED if in_flight else Occurrence.Outcome.PENDING
        try:
            with transaction.atomic():
                occurrence = Occurrence.objects.create(
                    schedule=schedule, scheduled_for=newest, revision=revision, outcome=outcome
                )
        except IntegrityError:
            occurrence = None  # already materialized (a crash after insert, or a race): never twice
        if occurrence is not None and outcome == Occurrence.Outcome.PENDING:
            enqueue(occurrence.pk)
            report.enqueued.append(occurrence.pk)
        elif occurrence is not None:
            report.skipped += 1
    update: dict[str, object] = {"next_occurrence_at": following}
    if schedule.kind == Schedule.Kind.ONE_TIME and late:
        update["status"] = Schedule.Status.COMPLETED  # its only slot was missed
    Schedule.objects.filter(pk=schedule.pk).update(**update)


# -- the occurrence task ------------------------------------------------------------------------


def execute_occurrence(
    occurrence_id: int, *, client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep
) -> Run | None:
    """Claim, admit and run one occurrence. Idempotent: a second delivery does nothing.

    The claim, the new conversation, the run (with the revision's complete limits copied) and the
    reservation are one transaction: if the reservation cannot be written, nothing starts. A
    refused admission is a failed run (`admission_denied`), counted like any failure.
    """
    attempt = uuid.uuid4()
    refusal: ledger.AdmissionRefused | None = None
    now = timezone.now()
    with transaction.atomic():
        claimed = Occurrence.objects.filter(pk=occurrence_id, outcome=Occurrence.Outcome.PENDING).update(
            outcome=Occurrence.Outcome.RUNNING, attempt=attempt, claimed_at=now
        )
        if claimed != 1:
            return None  # another worker has it, or it already ended
        # The grace window was applied when the slot was found; a task that waited in a busy
        # queue still runs, late, rather than losing the owner's briefing.
        occurrence = Occurrence.objects.select_related("schedule", "revision", "revision__agent").get(
            pk=occurrence_id
        )
        run = _start_run(occurrence, attempt)
        try:
            with transaction.atomic():
                ledger.reserve(run.owner_id, run_id=run.pk, amount=run.run_limits.max_cost, now=now)
        except ledger.AdmissionRefused as exc:
            refusal = exc
    if refusal is not None:
        failure = AdmissionDenied(f"Admission refused: {refusal.message}.", dimension=refusal.ceiling)
        run_services.finish_run(run, Outcome(status=Run.Status.FAILED, failure=failure), attempt=attempt)
        run.refresh_from_db()
        return run
    return execute_run(run, client=client, sleep=sleep)


def _start_run(occurrence: Occurrence, attempt: uuid.UUID) -> Run:
    schedule, revision = occurrence.schedule, occurrence.revision
    local = occurrence.scheduled_for.astimezone(zoneinfo.ZoneInfo(revision.timezone))
    conversation = Conversation.objects.create(
        owner_id=schedule.owner_id,
        title=f"{revision.title} — {local:%-d %b %Y}",
        metadata={
            "schedule_id": schedule.pk,
            "occurrence_id": occurrence.pk,
            "scheduled_for": occurrence.scheduled_for.isoformat(),
            "revision": revision.number,
        },
    )
    run = run_services.create_run(
        schedule.owner_id,
        revision.agent,
        revision.prompt,
        conversation=conversation,
        limits=revision.run_limits,  # the complete pinned value, whatever fields it has
        attempt=attempt,
    )
    Occurrence.objects.filter(pk=occurrence.pk).update(run=run)
    return run


def reap(*, now: datetime | None = None) -> tuple[list[int], int]:
    """Fail runs whose worker died (`worker_lost`, counted), and record as missed the occurrences
    whose task was lost (still pending long after django-q2 would have redelivered it), so they
    stop counting as in flight. Idempotent."""
    now = now or timezone.now()
    lost = run_services.fail_lost_runs(now=now)
    lost_task_after = timedelta(seconds=settings.Q_RETRY_SECONDS) + grace()
    stale = Occurrence.objects.filter(
        outcome=Occurrence.Outcome.PENDING, created_at__lt=now - lost_task_after
    ).update(outcome=Occurrence.Outcome.MISSED, finished_at=now)
    return lost, stale
