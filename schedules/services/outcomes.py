"""What a scheduled run's end does to its occurrence and schedule: the outcome, the failure count
and the pause it may trigger, and the content-free accounting event (docs/contract.md#schedules).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from accounting import ledger
from accounting.money import format_money
from runs.models import Run
from schedules.forecast import table as forecast_table
from schedules.models import (
    Occurrence,
    PauseEvent,
    Schedule,
)
from schedules.services.definitions import lock_schedule_if
from schedules.services.pausing import complete_schedules, pause_locked

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


def record_run_outcome(run: Run, *, now: datetime | None = None) -> Occurrence | None:
    """A scheduled run ended: record the occurrence outcome, count it, pause at the failure limit,
    complete a one-time schedule, and write `schedule.run_accounted`.

    Called inside the transaction that writes the run's terminal state (runs.signals), so the
    event and the count can never disagree with the run. Not a scheduled run: does nothing.
    """
    occurrence = Occurrence.objects.select_for_update().filter(run_id=run.pk).first()
    if occurrence is None:
        return None
    schedule = lock_schedule_if(Schedule(pk=occurrence.schedule_id), status=None)
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
    if run.status == Run.Status.COMPLETED and schedule.kind == Schedule.Kind.RECURRING:
        # Its expected cost per run is the median of its last completed runs: this one joins them.
        forecast_table.recount(schedule.pk, now=now)

    if schedule.kind == Schedule.Kind.ONE_TIME:
        # Its only occurrence ran, whatever the outcome (which is still counted above).
        complete_schedules([schedule], now=now, detail=f"its only run ended {run.status}")
    elif (
        run.status == Run.Status.FAILED
        and failures >= occurrence.revision.max_consecutive_failures
        and schedule.status == Schedule.Status.ACTIVE
    ):
        pause_locked(
            schedule,
            reason=PauseEvent.Reason.FAILURE_LIMIT,
            actor_id=None,
            now=now,
            run_id=run.pk,
            failure_limit=occurrence.revision.max_consecutive_failures,
        )
    return occurrence
