from __future__ import annotations

import os
from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate, pre_delete


class SchedulesConfig(AppConfig):
    name = "schedules"
    verbose_name = "Schedules"

    def ready(self) -> None:
        from accounting.signals import thresholds_crossed
        from runs.signals import run_claimed, run_finished
        from schedules import checks  # noqa: F401  (registers the system checks)
        from schedules.notices import budget
        from schedules.tasks import ensure_periodic_tasks
        from schedules.tools import register_schedule_tools
        from schedules.waker import forget_inherited_waker

        run_claimed.connect(_mark_occurrence_running, dispatch_uid="schedules.mark_occurrence_running")
        run_finished.connect(_record_run_outcome, dispatch_uid="schedules.record_run_outcome")
        run_finished.connect(_queue_completion_notice, dispatch_uid="schedules.queue_completion_notice")
        thresholds_crossed.connect(budget.queue, dispatch_uid="schedules.queue_budget_notice")
        post_migrate.connect(ensure_periodic_tasks, sender=self, dispatch_uid="schedules.periodic_tasks")
        pre_delete.connect(
            _forget_forecast, sender="schedules.Schedule", dispatch_uid="schedules.forget_forecast"
        )
        register_schedule_tools()
        os.register_at_fork(after_in_child=forget_inherited_waker)


def _mark_occurrence_running(sender: Any, run: Any, attempt: Any, **kwargs: Any) -> None:
    from schedules.execution import mark_occurrence_running

    occurrence_id = run.conversation.metadata.get("occurrence_id")
    if run.kind != "delegated" and occurrence_id is not None:
        mark_occurrence_running(occurrence_id, attempt)


def _record_run_outcome(sender: Any, run: Any, **kwargs: Any) -> None:
    from schedules.services import record_run_outcome

    if run.kind == "delegated" or "occurrence_id" not in run.conversation.metadata:
        return  # not a scheduled occurrence's run
    record_run_outcome(run)


def _queue_completion_notice(sender: Any, run: Any, **kwargs: Any) -> None:
    from schedules.notices import completed

    if (
        run.status != "completed"
        or run.kind == "delegated"
        or "occurrence_id" not in run.conversation.metadata
    ):
        return  # only a scheduled occurrence's completed run is announced
    completed.queue(run)


def _forget_forecast(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A schedule deleted (with its owner, or by a test) leaves the forecast in the same transaction."""
    from schedules.forecast import table

    table.forget([instance.pk])
