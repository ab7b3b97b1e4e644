"""manage.py check_rollups [--repair] [--owner ID]: compare the spend and usage rollups with the ledger."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from accounting import rollups
from accounting.models import LedgerEntry, SpendRollup, UsageRollup

PROGRESS_EVERY = 100_000
TOKEN_FIELDS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
)
# A usage rollup row's sums, in this order (accounting.ledger writes them with each entry).
USAGE_FIELDS = (
    "calls",
    "cost",
    *TOKEN_FIELDS,
    "cost_input",
    "cost_cache_read",
    "cost_cache_write",
    "cost_output",
)

Key = tuple[int, int, str, Any]
UsageKey = tuple[int, str, str, str, Any]


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
                    for table in (SpendRollup._meta.db_table, UsageRollup._meta.db_table):
                        cursor.execute(f'LOCK TABLE "{table}" IN EXCLUSIVE MODE')
            expected, expected_usage = self._expected(owner)
            stored, stored_usage = self._stored(owner), self._stored_usage(owner)
            wrong_owners = sorted(
                {
                    key[0]
                    for key in set(expected) | set(stored)
                    if expected.get(key, Decimal(0)) != stored.get(key, Decimal(0))
                }
                | {
                    key[0]
                    for key in set(expected_usage) | set(stored_usage)
                    if expected_usage.get(key) != stored_usage.get(key)
                }
            )
            if not wrong_owners:
                rows = len(stored) + len(stored_usage)
                self.stdout.write(self.style.SUCCESS(f"Rollups match the ledger ({rows} rows)."))
                return
            if not repair:
                owners = f"{len(wrong_owners)} owner(s) ({_ids(wrong_owners)})"
                raise CommandError(
                    f"Rollups differ from the ledger for {owners}; run with --repair to rebuild them."
                )
            SpendRollup.objects.filter(owner_id__in=wrong_owners).delete()
            UsageRollup.objects.filter(owner_id__in=wrong_owners).delete()
            SpendRollup.objects.bulk_create(
                [
                    SpendRollup(owner_id=o, key=k, grain=g, start=s, cost=c)
                    for (o, k, g, s), c in expected.items()
                    if o in wrong_owners
                ],
                batch_size=5_000,
            )
            UsageRollup.objects.bulk_create(
                [
                    UsageRollup(
                        owner_id=o,
                        provider=p,
                        model=m,
                        grain=g,
                        start=s,
                        **dict(zip(USAGE_FIELDS, v, strict=True)),
                    )
                    for (o, p, m, g, s), v in expected_usage.items()
                    if o in wrong_owners
                ],
                batch_size=5_000,
            )
        self.stdout.write(
            self.style.SUCCESS(f"Rebuilt the rollups of {len(wrong_owners)} owner(s) from the ledger.")
        )

    def _expected(self, owner: int | None) -> tuple[dict[Key, Decimal], dict[UsageKey, tuple[Any, ...]]]:
        entries = LedgerEntry.objects.all() if owner is None else LedgerEntry.objects.filter(owner_id=owner)
        total = entries.count()
        rows = entries.values_list(
            "owner_id",
            "schedule_id",
            "created_at",
            "cost",
            "provider",
            "model",
            *TOKEN_FIELDS,
            "charged_by_kind",
        ).iterator(chunk_size=10_000)
        usage: dict[UsageKey, list[Any]] = {}
        spend: list[tuple[int, int | None, Any, Decimal]] = []
        for index, (owner_id, schedule_id, at, cost, provider, model, *rest) in enumerate(rows, start=1):
            if index % PROGRESS_EVERY == 0:
                self.stdout.write(f"… {index:,} of {total:,} ledger entries read")
            spend.append((owner_id, schedule_id, at, cost))
            *tokens, by_kind = rest
            charged = [Decimal((by_kind or {}).get(kind, "0")) for kind in ("input", "cache_read")]
            write = sum(
                (Decimal((by_kind or {}).get(k, "0")) for k in ("cache_write_5m", "cache_write_1h")),
                Decimal(0),
            )
            values = [1, cost, *tokens, *charged, write, Decimal((by_kind or {}).get("output", "0"))]
            for grain, start in (
                (rollups.QUARTER, rollups.quarter_of(at)),
                (rollups.DAY, rollups.day_of(at)),
            ):
                key = (owner_id, provider, model, grain, start)
                row = usage.setdefault(key, [0] * len(values))
                usage[key] = [a + b for a, b in zip(row, values, strict=True)]
        return rollups.from_entries(spend), {key: tuple(value) for key, value in usage.items()}

    def _stored(self, owner: int | None) -> dict[Key, Decimal]:
        rows = SpendRollup.objects.all() if owner is None else SpendRollup.objects.filter(owner_id=owner)
        return {
            (o, k, g, s): c
            for o, k, g, s, c in rows.values_list("owner_id", "key", "grain", "start", "cost").iterator(
                chunk_size=10_000
            )
        }

    def _stored_usage(self, owner: int | None) -> dict[UsageKey, tuple[Any, ...]]:
        rows = UsageRollup.objects.all() if owner is None else UsageRollup.objects.filter(owner_id=owner)
        return {
            (o, p, m, g, s): tuple(values)
            for o, p, m, g, s, *values in rows.values_list(
                "owner_id", "provider", "model", "grain", "start", *USAGE_FIELDS
            ).iterator(chunk_size=10_000)
        }


def _ids(owners: list[int]) -> str:
    shown = ", ".join(str(o) for o in owners[:10])
    return shown + (f" and {len(owners) - 10} more" if len(owners) > 10 else "")
