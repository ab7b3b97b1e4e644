"""django-q2 entry points. With runs/tasks.py, the only modules that import django_q.

The cluster is a worker here: its own scheduler only fires `tick` and `reap` every minute.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django_q.tasks import async_task

from schedules import execution

logger = logging.getLogger(__name__)

OCCURRENCE_TASK = "schedules.tasks.run_occurrence"


def enqueue_occurrence(occurrence_id: int) -> None:
    """With the ORM broker on the default database the task row is written in the caller's
    transaction; with any other broker it is sent only once that transaction commits."""

    def send() -> None:
        async_task(
            OCCURRENCE_TASK, occurrence_id, task_name=f"occurrence-{occurrence_id}", group="occurrences"
        )

    if settings.Q_CLUSTER.get("orm") == "default":
        send()
    else:
        transaction.on_commit(send)


def tick() -> str:
    """Materialize due occurrences and enqueue them (every minute)."""
    report = execution.materialize_due(enqueue=enqueue_occurrence)
    if report.enqueued or report.missed or report.skipped or report.paused:
        logger.info("tick: %s", report)
    return str(report)


def run_occurrence(occurrence_id: int) -> str:
    """Run one occurrence; a second delivery of the same task does nothing."""
    run = execution.execute_occurrence(occurrence_id)
    return f"occurrence {occurrence_id}: " + (f"run {run.pk} {run.status}" if run else "already claimed")


def reap() -> str:
    """Fail runs whose worker stopped heartbeating; mark never-delivered occurrences missed."""
    lost, stale = execution.reap()
    if lost or stale:
        logger.warning("reaper: %d run(s) worker_lost, %d stale occurrence(s) missed", len(lost), stale)
    return f"{len(lost)} lost, {stale} stale"
