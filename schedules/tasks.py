"""django-q2 entry points. With runs/tasks.py, the only modules that import django_q.

The cluster is a worker here: its own scheduler only fires `tick`, `reap` and `notify` every
minute. The ORM broker that writes tasks in the caller's transaction lives in runs/tasks.py,
which also holds the conversations' message task.
"""

from __future__ import annotations

import logging
from typing import Any

from django_q.models import OrmQ
from django_q.signals import post_spawn
from django_q.tasks import async_task

from runs.inflight import take_turn
from runs.tasks import MESSAGE_TASK, in_transaction
from schedules import execution, proposals, waker
from schedules.notices import deliver_pending

logger = logging.getLogger(__name__)

OCCURRENCE_TASK = "schedules.tasks.run_occurrence"


def _send(occurrence_id: int, **options: Any) -> None:
    async_task(
        OCCURRENCE_TASK,
        occurrence_id,
        task_name=f"occurrence-{occurrence_id}",
        group="occurrences",
        **options,
    )


def enqueue_occurrences(occurrence_ids: list[int]) -> None:
    """One task per occurrence, written in the caller's transaction (runs.tasks.in_transaction)."""
    in_transaction(_send, occurrence_ids)


PERIODIC_TASKS = {
    "schedules.tick": "schedules.tasks.tick",
    "schedules.reap": "schedules.tasks.reap",
    "schedules.notify": "schedules.tasks.notify",
}


def ensure_periodic_tasks(**kwargs: Any) -> None:
    """The tick, the reaper and the notice outbox, every minute, created once by name after each
    migrate (a post_migrate hook). The django-q2 admin is read-only, so nobody edits them."""
    from django_q.models import Schedule as QueueSchedule

    for name, func in PERIODIC_TASKS.items():
        QueueSchedule.objects.get_or_create(
            name=name,
            defaults={"func": func, "schedule_type": QueueSchedule.MINUTES, "minutes": 1, "repeats": -1},
        )


def start_waker(**kwargs: Any) -> None:
    """Each worker process, as django-q2 spawns it, starts its waker: the tick at a schedule's
    slot and a turn when runs are queued, without waiting for the broker (schedules.waker)."""
    waker.start(enqueue_occurrences)


post_spawn.connect(start_waker, dispatch_uid="schedules.start_waker")


def notify() -> str:
    """Send the notices that committed since the last run (the outboxes), every minute: pauses,
    decided revision requests, and completed runs the owner asked to hear about."""
    attempts = deliver_pending()
    return ", ".join(f"{a.channel} {a.outcome}" for a in attempts) or "nothing to send"


def tick() -> str:
    """Materialize due occurrences and enqueue them (every minute)."""
    report = execution.materialize_due(enqueue=enqueue_occurrences)
    if report.enqueued or report.missed or report.skipped or report.paused or report.refused:
        logger.info("tick: %s", report)
    return str(report)


def run_occurrence(occurrence_id: int) -> str:
    """A turn at claiming a queued run (runs.inflight): the fairest one, not necessarily this
    occurrence's; a second delivery claims nothing more than the runs still queued."""
    runs = take_turn(again=lambda: _send(occurrence_id))
    started = f"{len(runs)} run(s) in flight" if runs else "nothing left to claim"
    return f"turn of occurrence {occurrence_id}: {started}"


def _queued_tasks() -> execution.QueuedTasks:
    """The occurrences and interactive runs whose tasks are still in the ORM queue (read only
    when some run has waited suspiciously long)."""
    occurrences: set[int] = set()
    runs: set[int] = set()
    for row in OrmQ.objects.all().only("payload"):
        try:
            task = row.task
        except Exception:  # a package signed with another key, or corrupt: not one of ours
            logger.warning("unreadable task package %s in the queue", row.pk)
            continue
        if not task.get("args"):
            continue
        if task.get("func") == OCCURRENCE_TASK:
            occurrences.add(int(task["args"][0]))
        elif task.get("func") == MESSAGE_TASK:
            runs.add(int(task["args"][0]))
    return execution.QueuedTasks(frozenset(occurrences), frozenset(runs))


def reap() -> str:
    """Fail runs whose worker stopped heartbeating or whose task was lost, and record the expiry
    of chat proposals left unconfirmed past their time."""
    lost = execution.reap(queued_tasks=_queued_tasks)
    if lost:
        logger.warning("reaper: %d run(s) failed worker_lost", len(lost))
    expired = proposals.expire_stale()
    return f"{len(lost)} lost, {expired} proposal(s) expired"
