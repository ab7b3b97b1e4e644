"""Admission against the owner's daily and monthly ceilings: exact under concurrency, counted in
the owner's time zone."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import transaction

from accounting import ledger
from accounting.models import Reservation
from tests.concurrency import race
from tests.factories import spend

CEILING = Decimal("25.00")
PER_RUN = Decimal("5.00")


def _budget(owner, **ceilings):
    budget = ledger.budget_for(owner.pk)
    for field, value in ceilings.items():
        setattr(budget, field, Decimal(value))
    budget.save()
    return budget


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("clients", [8, 50])
def test_concurrent_admissions_at_the_cap_never_exceed_the_ceiling(owner, clients):
    _budget(owner, daily_ceiling=CEILING)

    def admit(index: int) -> bool:
        try:
            with transaction.atomic():
                ledger.reserve(owner.pk, run_id=1000 + index, amount=PER_RUN)
            return True
        except ledger.AdmissionRefused:
            return False

    results = race([lambda i=i: admit(i) for i in range(clients)])

    assert results.count(True) == 5 and results.count(False) == clients - 5
    assert sum(r.amount for r in Reservation.objects.filter(owner=owner)) == CEILING


@pytest.mark.django_db(transaction=True)
def test_a_naive_read_then_write_admission_demonstrably_loses(owner):
    """The harness can see a race: without the row lock, every client reads the same headroom."""
    _budget(owner, daily_ceiling=CEILING)

    everyone_has_read = threading.Barrier(8)

    def naive_admit(index: int) -> bool:
        with transaction.atomic():
            summary = ledger.summarize(owner.pk)
            fits = summary.refusal(PER_RUN) is None
            everyone_has_read.wait()  # every client has read before any writes
            if fits:
                Reservation.objects.create(
                    owner=owner, run_id=2000 + index, amount=PER_RUN, created_at=datetime.now(UTC)
                )
            return fits

    results = race([lambda i=i: naive_admit(i) for i in range(8)])

    admitted = sum(r.amount for r in Reservation.objects.filter(owner=owner))
    assert results.count(True) == 8
    assert admitted > CEILING  # over-admitted: what the locked version prevents


@pytest.mark.django_db
def test_spend_rolls_over_at_midnight_and_month_end_in_the_owners_time_zone(owner):
    _budget(owner, daily_ceiling="25.00", monthly_ceiling="250.00")
    budget = ledger.budget_for(owner.pk)
    budget.timezone = "Pacific/Auckland"  # UTC+13 in December
    budget.save()

    spend(owner.pk, "3.00", at=datetime(2026, 11, 30, 10, 30, tzinfo=UTC))  # 30 Nov 23:30 in Auckland
    spend(owner.pk, "4.00", at=datetime(2026, 11, 30, 11, 30, tzinfo=UTC))  # 1 Dec 00:30 in Auckland
    spend(owner.pk, "5.00", at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC))  # 1 Dec 22:00 in Auckland

    on_1_dec = ledger.summarize(owner.pk, now=datetime(2026, 12, 1, 10, 0, tzinfo=UTC))  # 1 Dec 23:00
    assert (on_1_dec.spent_today, on_1_dec.spent_month) == (Decimal("9.00"), Decimal("9.00"))
    on_30_nov = ledger.summarize(owner.pk, now=datetime(2026, 11, 30, 10, 45, tzinfo=UTC))
    assert (on_30_nov.spent_today, on_30_nov.spent_month) == (Decimal("3.00"), Decimal("3.00"))
    on_2_dec = ledger.summarize(owner.pk, now=datetime(2026, 12, 1, 11, 5, tzinfo=UTC))  # 2 Dec 00:05
    assert (on_2_dec.spent_today, on_2_dec.spent_month) == (Decimal("0"), Decimal("9.00"))


@pytest.mark.django_db
def test_admission_counts_spend_and_open_reservations_against_both_ceilings(owner):
    _budget(owner, daily_ceiling="12.00", monthly_ceiling="15.00")
    now = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
    spend(owner.pk, "6.00", at=datetime(2026, 12, 2, tzinfo=UTC))
    ledger.reserve(owner.pk, run_id=10, amount=PER_RUN, now=now)  # 6 spent this month + 5 held = 11
    with pytest.raises(ledger.AdmissionRefused) as refused:
        ledger.reserve(owner.pk, run_id=11, amount=PER_RUN, now=now)
    assert refused.value.ceiling == "monthly"
    assert "monthly ceiling of USD 15.00" in refused.value.message
    assert ledger.release(10) is True and ledger.release(10) is False
    ledger.reserve(owner.pk, run_id=11, amount=PER_RUN, now=now)
