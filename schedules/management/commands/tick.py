from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from schedules import execution
from schedules.tasks import enqueue_occurrences


class Command(BaseCommand):
    help = "Materialize due occurrences once and enqueue them; --sync also runs them here and waits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sync", action="store_true", help="Execute the occurrences in this process.")

    def handle(self, *args: Any, sync: bool = False, **options: Any) -> None:
        collected: list[int] = []

        def progress(report: execution.TickReport) -> None:
            self.stdout.write(f"… {report}")

        if sync:
            report = execution.materialize_due(enqueue=collected.extend, progress=progress)
        else:
            report = execution.materialize_due(enqueue=enqueue_occurrences, progress=progress)
        self.stdout.write(f"Tick: {report}.")
        for index, occurrence_id in enumerate(collected, start=1):
            run = execution.execute_occurrence(occurrence_id)
            outcome = f"run {run.pk} {run.status}" if run else "already claimed elsewhere"
            if run is not None and run.failure_reason:
                outcome += f" ({run.failure_reason}, {run.error_class})"
            self.stdout.write(f"[{index}/{len(collected)}] occurrence {occurrence_id}: {outcome}")
