"""django-q2 entry points. With runs/tasks.py, the only modules that import django_q.

The cluster is a worker here: its own scheduler only fires `tick`, `reap` and `notify` every
minute.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.models import OrmQ
from django_q.tasks import async_task

from schedules import execution
from schedules.notifications import deliver_pending_decision_notices, deliver_pending_notices

logger = logging.getLogger(__name__)

OCCURRENCE_TASK = "schedules.tasks.run_occurrence"


class _BufferedOrmBroker(ORM):  # type: ignore[misc]
    """django-q2's ORM broker, keeping the packages async_task signs so a tick inserts all its
    tasks with one statement, in the tick's own transaction."""

    def __init__(self) -> None:
        super().__init__()
        self.packages: list[str] = []

    def enqueue(self, task: str) -> None:
        self.packages.append(task)

    def flush(self) -> None:
        now = timezone.now()
        OrmQ.objects.bulk_create(
            [OrmQ(key=self.list_key, payload=package, lock=now) for package in self.packages]
        )
        self.packages = []


def _send(occurrence_id: int, **options: Any) -> None:
    async_task(
        OCCURRENCE_TASK,
        occurrence_id,
        task_name=f"occurrence-{occurrence_id}",
        group="occurrences",
        **options,
    )


def enqueue_occurrences(occurrence_ids: list[int]) -> None:
    """One task per occurrence. With the ORM broker on the default database the task rows are
    written in the caller's transaction; with any other broker they are sent once it commits."""
    if not occurrence_ids:
        return
    if settings.Q_CLUSTER.get("orm") == "default":
        broker = _BufferedOrmBroker()
        for occurrence_id in occurrence_ids:
            _send(occurrence_id, broker=broker)
        broker.flush()
    else:

        def send_all() -> None:
            for occurrence_id in occurrence_ids:
                _send(occurrence_id)

        transaction.on_commit(send_all)


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


def notify() -> str:
    """Send the notices of pauses and of decided revision requests that committed since the last
    run (the outboxes), every minute."""
    attempts = deliver_pending_notices()
    attempts += deliver_pending_decision_notices()  # decided revision requests, the same channels
    return ", ".join(f"{a.channel} {a.outcome}" for a in attempts) or "nothing to send"


def tick() -> str:
    """Materialize due occurrences and enqueue them (every minute)."""
    report = execution.materialize_due(enqueue=enqueue_occurrences)
    if report.enqueued or report.missed or report.skipped or report.paused or report.refused:
        logger.info("tick: %s", report)
    return str(report)


def run_occurrence(occurrence_id: int) -> str:
    """Run one occurrence; a second delivery of the same task does nothing."""
    run = execution.execute_occurrence(occurrence_id)
    return f"occurrence {occurrence_id}: " + (f"run {run.pk} {run.status}" if run else "already claimed")


def _queued_occurrences() -> set[int]:
    """The occurrences whose tasks are still in the ORM queue (read only when some run has
    waited suspiciously long)."""
    waiting: set[int] = set()
    for row in OrmQ.objects.all().only("payload"):
        try:
            task = row.task
        except Exception:  # a package signed with another key, or corrupt: not one of ours
            logger.warning("unreadable task package %s in the queue", row.pk)
            continue
        if task.get("func") == OCCURRENCE_TASK and task.get("args"):
            waiting.add(int(task["args"][0]))
    return waiting


def reap() -> str:
    """Fail runs whose worker stopped heartbeating or whose task was lost."""
    lost = execution.reap(waiting_occurrences=_queued_occurrences)
    if lost:
        logger.warning("reaper: %d run(s) failed worker_lost", len(lost))
    return f"{len(lost)} lost"
