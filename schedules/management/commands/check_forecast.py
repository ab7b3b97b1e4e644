"""manage.py check_forecast [--repair] [--owner ID]: compare the forecast's inputs with a recomputation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from schedules.forecast import table
from schedules.models import ForecastState, Schedule

PROGRESS_EVERY = 1_000


class Command(BaseCommand):
    help = (
        "Verify each owner's forecast inputs (ForecastGroup and ForecastInput rows) against a "
        "recomputation from their schedules and accounted runs, for the day the rows are for; with "
        "--repair, rebuild the owners that differ."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repair", action="store_true", help="Rebuild the owners whose rows differ.")
        parser.add_argument("--owner", type=int, help="Only this owner (user id).")

    def handle(self, *args: Any, repair: bool = False, owner: int | None = None, **options: Any) -> None:
        owners = set(ForecastState.objects.values_list("owner_id", flat=True))
        owners |= set(
            Schedule.objects.filter(status=Schedule.Status.ACTIVE)
            .values_list("owner_id", flat=True)
            .distinct()
        )
        if owner is not None:
            owners &= {owner}
        wrong: list[int] = []
        groups = inputs = 0
        for index, owner_id in enumerate(sorted(owners), start=1):
            if index % PROGRESS_EVERY == 0:
                self.stdout.write(f"… {index:,} of {len(owners):,} owners checked")
            stored = table.stored(owner_id)
            if stored is None:
                wrong.append(owner_id)  # active schedules the forecast never saw
                continue
            if table.expected(owner_id, day=stored.day, zone_name=stored.zone_name) != stored:
                wrong.append(owner_id)
            groups += len(stored.groups)
            inputs += len(stored.inputs)
        behind = ForecastState.objects.filter(valid_until__lt=timezone.now() - timedelta(minutes=10))
        if owner is not None:
            behind = behind.filter(owner_id=owner)
        if behind.exists():
            # Consistent rows for an earlier day: the tick moves them on (pages read around it).
            self.stdout.write(f"{behind.count()} owner(s) still on an earlier day: the tick moves them on.")
        if not wrong:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Forecast inputs match a recomputation ({len(owners)} owners, {groups} groups, "
                    f"{inputs} schedules)."
                )
            )
            return
        shown = ", ".join(str(o) for o in wrong[:10]) + (
            f" and {len(wrong) - 10} more" if len(wrong) > 10 else ""
        )
        if not repair:
            raise CommandError(
                f"Forecast inputs differ from a recomputation for {len(wrong)} owner(s) ({shown}); "
                "run with --repair to rebuild them."
            )
        for owner_id in wrong:
            with transaction.atomic():
                table.rebuild(owner_id)
        self.stdout.write(self.style.SUCCESS(f"Rebuilt the forecast inputs of {len(wrong)} owner(s)."))
