from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from accounting import ledger
from accounting.models import AccountingEvent, AppendOnlyError, LedgerEntry

pytestmark = pytest.mark.django_db


def test_a_ledger_entry_cannot_be_updated_or_deleted(owner):
    entry_id = ledger.record_usage(
        ledger.Call(
            owner_id=owner.pk,
            run_id=1,
            schedule_id=None,
            provider="openai",
            model="m",
            input_tokens=1,
            output_tokens=1,
            cost=Decimal("0.01"),
            at=timezone.now(),
        )
    )
    entry = LedgerEntry.objects.get(pk=entry_id)
    entry.cost = Decimal(0)
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        LedgerEntry.objects.filter(pk=entry.pk).update(cost=0)
    with pytest.raises(AppendOnlyError):
        entry.delete()
    with pytest.raises(AppendOnlyError):
        LedgerEntry.objects.all().delete()
    assert LedgerEntry.objects.get().cost == Decimal("0.01")


def test_an_accounting_event_cannot_be_updated_or_deleted(owner):
    event = ledger.record_run_accounted(
        owner_id=owner.pk, schedule_id=1, run_id=1, payload={"status": "failed"}
    )
    with pytest.raises(AppendOnlyError):
        AccountingEvent.objects.filter(pk=event.pk).update(payload={})
    with pytest.raises(AppendOnlyError):
        event.delete()


def test_the_database_refuses_negative_money(owner):
    from django.db import IntegrityError

    with pytest.raises(IntegrityError):
        ledger.record_usage(
            ledger.Call(
                owner_id=owner.pk,
                run_id=1,
                schedule_id=None,
                provider="x",
                model="m",
                input_tokens=1,
                output_tokens=1,
                cost=Decimal("-0.01"),
                at=timezone.now(),
            )
        )
