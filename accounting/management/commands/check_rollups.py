"""manage.py check_rollups [--repair] [--owner ID]: compare the spend rollups with the ledger."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from accounting import rollups
from accounting.models import LedgerEntry, SpendRollup

PROGRESS_EVERY = 100_000

Key = tuple[int, int, str, Any]


class Command(BaseCommand):
    help = "Verify the spend rollups against the ledger; with --repair, rebuild the ones that differ."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repair", action="store_true", help="Rebuild the owners whose rollups differ.")
        parser.add_argument("--owner", type=int, help="Only this owner (user id).")

    def handle(self, *args: Any, repair: bool = False, owner: int | None = None, **options: Any) -> None:
        with transaction.atomic():
            if repair:
                # Writers wait while the ledger is read and the rollups rewritten, so an entry
                # committed meanwhile is added to the rebuilt rows, not lost under them.
                with connection.cursor() as cursor:
                    cursor.execute(f'LOCK TABLE "{SpendRollup._meta.db_table}" IN EXCLUSIVE MODE')
            expected = self._expected(owner)
            stored = self._stored(owner)
            wrong_owners = sorted(
                {
                    key[0]
                    for key in set(expected) | set(stored)
                    if expected.get(key, Decimal(0)) != stored.get(key, Decimal(0))
                }
            )
            if not wrong_owners:
                self.stdout.write(self.style.SUCCESS(f"Rollups match the ledger ({len(stored)} rows)."))
                return
            if not repair:
                owners = f"{len(wrong_owners)} owner(s) ({_ids(wrong_owners)})"
                raise CommandError(
                    f"Rollups differ from the ledger for {owners}; run with --repair to rebuild them."
                )
            SpendRollup.objects.filter(owner_id__in=wrong_owners).delete()
            SpendRollup.objects.bulk_create(
                [
                    SpendRollup(owner_id=o, key=k, grain=g, start=s, cost=c)
                    for (o, k, g, s), c in expected.items()
                    if o in wrong_owners
                ],
                batch_size=5_000,
            )
        self.stdout.write(
            self.style.SUCCESS(f"Rebuilt the rollups of {len(wrong_owners)} owner(s) from the ledger.")
        )

    def _expected(self, owner: int | None) -> dict[Key, Decimal]:
        entries = LedgerEntry.objects.all() if owner is None else LedgerEntry.objects.filter(owner_id=owner)
        total = entries.count()
        rows = entries.values_list("owner_id", "schedule_id", "created_at", "cost").iterator(
            chunk_size=10_000
        )

        def counted() -> Any:
            for index, row in enumerate(rows, start=1):
                if index % PROGRESS_EVERY == 0:
                    self.stdout.write(f"… {index:,} of {total:,} ledger entries read")
                yield row

        return rollups.from_entries(counted())

    def _stored(self, owner: int | None) -> dict[Key, Decimal]:
        rows = SpendRollup.objects.all() if owner is None else SpendRollup.objects.filter(owner_id=owner)
        return {
            (o, k, g, s): c
            for o, k, g, s, c in rows.values_list("owner_id", "key", "grain", "start", "cost").iterator(
                chunk_size=10_000
            )
        }


def _ids(owners: list[int]) -> str:
    shown = ", ".join(str(o) for o in owners[:10])
    return shown + (f" and {len(owners) - 10} more" if len(owners) > 10 else "")
