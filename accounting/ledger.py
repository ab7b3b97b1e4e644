"""The only writer of ledger entries, reservations and accounting events.

Callers own the transaction: usage is recorded in the same transaction as the run's counters,
and `schedule.run_accounted` in the same transaction as the run's terminal state.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from accounting.models import AccountingEvent, LedgerEntry, OwnerBudget, Reservation

ZERO = Decimal("0")


class AdmissionRefused(Exception):
    """The run does not fit under a ceiling; `message` says which and by how much."""

    def __init__(self, message: str, *, ceiling: str) -> None:
        super().__init__(message)
        self.message = message
        self.ceiling = ceiling


def budget_for(owner_id: int) -> OwnerBudget:
    """The owner's budget row, created on first use (safe against a concurrent first use)."""
    budget = OwnerBudget.objects.filter(owner_id=owner_id).first()
    if budget is not None:
        return budget
    try:
        with transaction.atomic():
            return OwnerBudget.objects.create(owner_id=owner_id, timezone=_default_timezone())
    except IntegrityError:
        return OwnerBudget.objects.get(owner_id=owner_id)


def _default_timezone() -> str:
    return str(settings.DEFAULT_OWNER_TIME_ZONE)


# -- periods in the owner's time zone ------------------------------------------------------------


def day_bounds(day: date, zone: zoneinfo.ZoneInfo) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, tzinfo=zone)
    return start, datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone)


def month_bounds(day: date, zone: zoneinfo.ZoneInfo) -> tuple[datetime, datetime]:
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return datetime.combine(first, time.min, tzinfo=zone), datetime.combine(following, time.min, tzinfo=zone)


def _spent(owner_id: int, start: datetime, end: datetime) -> Decimal:
    total = LedgerEntry.objects.filter(
        owner_id=owner_id, created_at__gte=start, created_at__lt=end
    ).aggregate(total=Sum("cost"))["total"]
    return total or ZERO


@dataclass(frozen=True)
class BudgetSummary:
    timezone: str
    daily_ceiling: Decimal
    monthly_ceiling: Decimal
    spent_today: Decimal
    spent_month: Decimal
    open_count: int
    open_total: Decimal

    @property
    def headroom_today(self) -> Decimal:
        return self.daily_ceiling - self.spent_today - self.open_total

    @property
    def headroom_month(self) -> Decimal:
        return self.monthly_ceiling - self.spent_month - self.open_total


def summarize(owner_id: int, *, now: datetime | None = None) -> BudgetSummary:
    """Ceilings, spend today and this month (owner's time zone), and open reservations."""
    budget = budget_for(owner_id)
    return _summarize(budget, now or timezone.now())


def _summarize(budget: OwnerBudget, now: datetime) -> BudgetSummary:
    zone = zoneinfo.ZoneInfo(budget.timezone)
    today = now.astimezone(zone).date()
    month_start, month_end = month_bounds(today, zone)
    day_start, day_end = day_bounds(today, zone)
    month = LedgerEntry.objects.filter(
        owner_id=budget.owner_id, created_at__gte=month_start, created_at__lt=month_end
    )
    sums = month.aggregate(
        month=Sum("cost"),
        today=Sum("cost", filter=_between(day_start, day_end)),
    )
    open_reservations = Reservation.objects.filter(
        owner_id=budget.owner_id, released_at__isnull=True
    ).aggregate(count=Count("id"), total=Sum("amount"))
    return BudgetSummary(
        timezone=budget.timezone,
        daily_ceiling=budget.effective_daily_ceiling,
        monthly_ceiling=budget.effective_monthly_ceiling,
        spent_today=sums["today"] or ZERO,
        spent_month=sums["month"] or ZERO,
        open_count=open_reservations["count"],
        open_total=open_reservations["total"] or ZERO,
    )


def _between(start: datetime, end: datetime) -> Q:
    return Q(created_at__gte=start, created_at__lt=end)


# -- admission --------------------------------------------------------------------------------


def reserve(owner_id: int, *, run_id: int, amount: Decimal, now: datetime | None = None) -> Reservation:
    """Hold `amount` for a run against the owner's daily and monthly ceilings, or AdmissionRefused.

    Exact under concurrency: the owner's budget row is locked for the read-compare-insert, so
    two admissions for one owner cannot both pass when only one fits. Must run inside the
    caller's transaction; if the reservation cannot be written, the caller's run never starts.
    """
    now = now or timezone.now()
    budget_for(owner_id)
    budget = OwnerBudget.objects.select_for_update().get(owner_id=owner_id)
    summary = _summarize(budget, now)
    for label, ceiling, spent in (
        ("daily", summary.daily_ceiling, summary.spent_today),
        ("monthly", summary.monthly_ceiling, summary.spent_month),
    ):
        if spent + summary.open_total + amount > ceiling:
            raise AdmissionRefused(
                f"the {label} ceiling of USD {ceiling:.2f} would be exceeded: spent USD {spent:.2f}, "
                f"reserved USD {summary.open_total:.2f}, this run needs USD {amount:.2f}",
                ceiling=label,
            )
    return Reservation.objects.create(owner_id=owner_id, run_id=run_id, amount=amount, created_at=now)


def release(run_id: int, *, now: datetime | None = None) -> bool:
    """Release the run's reservation. Idempotent: True only for the call that released it."""
    return (
        Reservation.objects.filter(run_id=run_id, released_at__isnull=True).update(
            released_at=now or timezone.now()
        )
        == 1
    )


# -- usage and events -------------------------------------------------------------------------


def record_usage(
    *,
    owner_id: int,
    run_id: int,
    schedule_id: int | None,
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cost: Decimal,
    at: datetime | None = None,
) -> LedgerEntry:
    """One provider call's usage. The caller updates the run's counters in the same transaction."""
    return LedgerEntry.objects.create(
        created_at=at or timezone.now(),
        owner_id=owner_id,
        run_id=run_id,
        schedule_id=schedule_id,
        provider=provider,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=cost,
    )


def record_run_accounted(
    *, owner_id: int, schedule_id: int, run_id: int, payload: dict[str, Any], at: datetime | None = None
) -> AccountingEvent:
    """`schedule.run_accounted`: content-free; written with the run's terminal state."""
    return AccountingEvent.objects.create(
        event=AccountingEvent.Kind.RUN_ACCOUNTED,
        created_at=at or timezone.now(),
        owner_id=owner_id,
        schedule_id=schedule_id,
        run_id=run_id,
        payload=payload,
    )
