"""Threshold alerts on the daily and monthly ceilings (docs/contract.md#threshold-alerts).

Crossing is judged at each admission (in its transaction, under the owner's budget row lock) and
after each charge: when spent + open reservations first reaches a threshold's share of a ceiling in
a period (the owner-local day or month), a BudgetAlert row is inserted for that threshold and
period. After a charge, each worker process reads where the owner stands only when the charge could
reach a threshold it has not seen told (it keeps, per owner, the headroom to the next one and the
ones already told) or when its reading is older than RECHECK_SECONDS: the run loop pays no read for
the charges that cannot cross anything, and a threshold crossed by charges of several processes
together is told at the next charge after at most RECHECK_SECONDS. The insert is `ON CONFLICT DO
NOTHING ... RETURNING`, so fifty runs crossing together record it once, and only the judge whose
insert won sends `thresholds_crossed`: the schedules app writes the notice in the same transaction
(schedules.notices.budget). A raised ceiling re-arms the thresholds now above the level (their rows
are marked `rearmed_at`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from accounting import ledger, rollups
from accounting.models import (
    BudgetAlert,
    OwnerBudget,
    Reservation,
    SpendRollup,
    default_alert_thresholds,
)
from accounting.signals import thresholds_crossed
from accounting.timezones import owner_zone

MAX_THRESHOLDS = 5
RECHECK_SECONDS = 5.0  # how old a process's reading of where an owner stands may get


class InvalidThresholds(ValueError):
    """Thresholds the owner cannot have; the message says why, in words."""


def parse_thresholds(value: Any) -> list[int]:
    """Whole percentages 1-100, distinct, at most five, as JSON integers (a string, a boolean or a
    fraction is refused, not read as a number); returned ascending."""
    if not isinstance(value, list):
        raise InvalidThresholds("give a list of whole percentages from 1 to 100, such as [50, 80, 100]")
    if len(value) > MAX_THRESHOLDS:
        raise InvalidThresholds(f"at most {MAX_THRESHOLDS} thresholds")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise InvalidThresholds(
                f"{str(item)[:20]!r} is not a whole percentage: use numbers from 1 to 100"
            )
        if not 1 <= item <= 100:
            raise InvalidThresholds(f"{item} is outside 1-100")
    if len(set(value)) != len(value):
        raise InvalidThresholds("each threshold may be given once")
    return sorted(value)


def thresholds_of(budget: OwnerBudget) -> list[int]:
    """The owner's thresholds; the default ones if the stored value is not valid (old data)."""
    try:
        return parse_thresholds(budget.alert_thresholds)
    except InvalidThresholds:
        return default_alert_thresholds()


def set_thresholds(owner_id: int, value: Any) -> list[int]:
    """Save the owner's thresholds (InvalidThresholds: nothing is saved). A new threshold already
    below the level is told at the next admission or charge."""
    thresholds = parse_thresholds(value)
    ledger.budget_for(owner_id)
    OwnerBudget.objects.filter(owner_id=owner_id).update(
        alert_thresholds=thresholds, updated_at=timezone.now()
    )
    forget_standing(owner_id)
    return thresholds


@dataclass(frozen=True)
class Level:
    """Where one period stands: spent + open reservations against its ceiling."""

    period: str
    start: date
    ceiling: Decimal
    level: Decimal

    def reached(self, thresholds: list[int]) -> list[int]:
        return [t for t in thresholds if self.ceiling > 0 and self.level * 100 >= self.ceiling * t]


def levels(summary: ledger.BudgetSummary, now: datetime) -> list[Level]:
    today = now.astimezone(owner_zone(summary.timezone)).date()
    return [
        Level(BudgetAlert.Period.DAY, today, summary.daily_ceiling, summary.spent_today + summary.open_total),
        Level(
            BudgetAlert.Period.MONTH,
            today.replace(day=1),
            summary.monthly_ceiling,
            summary.spent_month + summary.open_total,
        ),
    ]


_INSERT = f"""INSERT INTO "{BudgetAlert._meta.db_table}"
    (owner_id, period, period_start, threshold, ceiling, level, created_at, batch)
SELECT %s, * FROM unnest(%s::text[], %s::date[], %s::smallint[], %s::numeric[], %s::numeric[]),
    (SELECT %s::timestamptz, %s::uuid) AS judgement
ON CONFLICT (owner_id, period, period_start, threshold) WHERE rearmed_at IS NULL DO NOTHING
RETURNING id"""  # noqa: S608 - the table name is model metadata


def admit(
    requests: list[ledger.ReservationRequest], *, now: datetime | None = None
) -> dict[int, ledger.AdmissionRefused]:
    """Admission (ledger.reserve_many) and its threshold judgement, under the same locks: each owner
    who had a run admitted is judged where it now stands. Returns the refusals by run id. Inside
    the caller's transaction."""
    now = now or timezone.now()
    admission = ledger.reserve_many(requests, now=now)
    for budget in admission.budgets:
        if budget.owner_id in admission.admitted_owners:
            summary = admission.summaries[budget.owner_id]
            judge(budget.owner_id, summary, thresholds_of(budget), now=now)
    return admission.refusals


def admit_one(owner_id: int, *, run_id: int, amount: Decimal, now: datetime | None = None) -> None:
    """One run's admission with its judgement; raises AdmissionRefused when it does not fit."""
    refusals = admit([ledger.ReservationRequest(owner_id, run_id, amount)], now=now)
    if run_id in refusals:
        raise refusals[run_id]


def judge(owner_id: int, summary: ledger.BudgetSummary, thresholds: list[int], *, now: datetime) -> list[int]:
    """Record the thresholds the summary reaches that are not yet recorded for their period; tell
    the owner of those this call recorded (one notice naming them all). Inside the caller's
    transaction. Returns the new BudgetAlert ids."""
    rows = [(lv, t) for lv in levels(summary, now) for t in lv.reached(thresholds)]
    if not rows:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT,
            [
                owner_id,
                [lv.period for lv, _ in rows],
                [lv.start for lv, _ in rows],
                [t for _, t in rows],
                [lv.ceiling for lv, _ in rows],
                [lv.level for lv, _ in rows],
                now,
                uuid.uuid4(),
            ],
        )
        created = [row[0] for row in cursor.fetchall()]
    if created:
        thresholds_crossed.send(sender=BudgetAlert, owner_id=owner_id, alert_ids=created)
    return created


@dataclass
class _Seen:
    """A process's reading of where an owner stands: how much more may be charged before a
    threshold not yet told is reached, and the thresholds it has seen told."""

    read_at: float  # time.monotonic()
    headroom: Decimal  # Infinity: nothing left to reach this period
    told: set[tuple[str, date, int]] = field(default_factory=set)


_seen: dict[int, _Seen] = {}
_seen_lock = threading.Lock()


def forget_standing(owner_id: int | None = None) -> None:
    """Read the owner (or every owner) afresh at the next charge: its thresholds or ceilings changed."""
    with _seen_lock:
        if owner_id is None:
            _seen.clear()
        else:
            _seen.pop(owner_id, None)


def forget_inherited_standings() -> None:
    """In a forked child: the parent's lock may be held by a thread that does not exist here."""
    global _seen_lock
    _seen.clear()
    _seen_lock = threading.Lock()


def judge_owner(owner_id: int, cost: Decimal, *, now: datetime | None = None) -> list[int]:
    """After a charge of `cost`: if it could reach a threshold not yet told (or this process's
    reading is stale), read where the owner stands and judge it, the alert row and its notice in
    a transaction of their own. Returns the new BudgetAlert ids."""
    clock = time.monotonic()
    with _seen_lock:
        seen = _seen.get(owner_id)
        if seen is not None and clock - seen.read_at < RECHECK_SECONDS and cost < seen.headroom:
            seen.headroom -= cost
            return []  # the common case: nothing read, nothing written
    now = now or timezone.now()
    found = standing(owner_id, now)
    if found is None:
        return []
    summary, thresholds = found
    current = levels(summary, now)
    told = {key for key in seen.told if key[1] in {lv.start for lv in current}} if seen else set()
    due = [(lv, t) for lv in current for t in lv.reached(thresholds) if (lv.period, lv.start, t) not in told]
    created: list[int] = []
    if due:
        with transaction.atomic():
            created = judge(owner_id, summary, sorted({t for _, t in due}), now=now)
        told |= {(lv.period, lv.start, t) for lv, t in due}
    with _seen_lock:
        _seen[owner_id] = _Seen(clock, _headroom(current, thresholds), told)
    return created


def _headroom(current: list[Level], thresholds: list[int]) -> Decimal:
    """The least spend that reaches a threshold not yet reached in the current day or month."""
    room = Decimal("Infinity")
    for lv in current:
        for threshold in thresholds:
            gap = lv.ceiling * threshold / 100 - lv.level
            if lv.ceiling > 0 and gap > 0:
                room = min(room, gap)
    return room


_BUDGET_SQL = f"""SELECT timezone, daily_ceiling, monthly_ceiling, alert_thresholds
FROM "{OwnerBudget._meta.db_table}" WHERE owner_id = %s"""  # noqa: S608 - model metadata
_LEVEL_SQL = """SELECT
    (SELECT coalesce(sum(cost), 0) FROM "{rollups}" WHERE owner_id = %s AND key = 0 AND {day}),
    (SELECT coalesce(sum(cost), 0) FROM "{rollups}" WHERE owner_id = %s AND key = 0 AND {month}),
    (SELECT count(*) FROM "{reservations}" WHERE owner_id = %s AND released_at IS NULL),
    (SELECT coalesce(sum(amount), 0) FROM "{reservations}" WHERE owner_id = %s AND released_at IS NULL)"""


def standing(owner_id: int, now: datetime) -> tuple[ledger.BudgetSummary, list[int]] | None:
    """The owner's summary (as ledger.summarize computes it) and thresholds in two plain statements:
    judged after every charge, where building the summary's querysets cost ten times the queries
    (docs/performance.md). None before the owner has a budget row (nothing was admitted)."""
    with connection.cursor() as cursor:
        cursor.execute(_BUDGET_SQL, [owner_id])
        row = cursor.fetchone()
        if row is None:
            return None
        zone_name, daily, monthly, stored = row
        zone = owner_zone(zone_name)
        today = now.astimezone(zone).date()
        day, day_params = rollups.cover_sql(*ledger.day_bounds(today, zone))
        month, month_params = rollups.cover_sql(*ledger.month_bounds(today, zone))
        sql = _LEVEL_SQL.format(
            rollups=SpendRollup._meta.db_table, reservations=Reservation._meta.db_table, day=day, month=month
        )
        cursor.execute(sql, [owner_id, *day_params, owner_id, *month_params, owner_id, owner_id])
        spent_today, spent_month, open_count, open_total = cursor.fetchone()
    # Django reads jsonb as text from a plain cursor and decodes it in its fields; here, by hand.
    thresholds = json.loads(stored) if isinstance(stored, str) else stored
    budget = OwnerBudget(daily_ceiling=daily, monthly_ceiling=monthly, alert_thresholds=thresholds)
    summary = ledger.BudgetSummary(
        timezone=zone_name,
        daily_ceiling=budget.effective_daily_ceiling,
        monthly_ceiling=budget.effective_monthly_ceiling,
        spent_today=spent_today,
        spent_month=spent_month,
        open_count=open_count,
        open_total=open_total,
    )
    return summary, thresholds_of(budget)


def crossed(
    owner_id: int,
    summary: ledger.BudgetSummary,
    *,
    now: datetime | None = None,
    recent: list[dict[str, Any]] | None = None,
) -> list[BudgetAlert]:
    """The thresholds crossed in the current day and month, highest first (for the top bar and the
    API): among `recent` (the budget row's `recent_alerts`, read with it) when given, else read."""
    now = now or timezone.now()
    if recent is None:
        recent = _recent(owner_id, now)
    periods = {(lv.period, lv.start) for lv in levels(summary, now)}
    found = [_alert(owner_id, row) for row in recent]
    return sorted(
        (a for a in found if (a.period, a.period_start) in periods), key=lambda a: (-a.threshold, a.period)
    )


def recent_alerts(now: datetime | None = None) -> tuple[str, list[Any]]:
    """The owner's live alerts of the periods that can be current somewhere on Earth (_RECENT_SQL),
    as a column of the budget row (ledger.budget_row; accounting.selectors.request_budget), so the
    top bar's alerts cost no query of their own. Read it with `recent_of`."""
    return _recent_sql("b.owner_id", now or timezone.now())


def recent_of(column: str) -> list[dict[str, Any]]:
    """The `recent_alerts` column as read: a JSON array, as text."""
    result: list[dict[str, Any]] = json.loads(column)
    return result


def _recent(owner_id: int, now: datetime) -> list[dict[str, Any]]:
    sql, params = _recent_sql("%s", now)
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_id, *params])
        return recent_of(cursor.fetchone()[0])


def _recent_sql(owner: str, now: datetime) -> tuple[str, list[Any]]:
    """The owner's live alerts of a day since yesterday in UTC or a month begun in the last 31
    days (every zone's current day and month are among them), as one JSON array of objects. A few
    rows at most, by the index of live alerts (budget_alert_once). Amounts travel as text: a JSON
    number would be a float."""
    today = now.astimezone(UTC).date()
    sql = _RECENT_SQL.format(table=BudgetAlert._meta.db_table, owner=owner)
    day, month = today - timedelta(days=1), today - timedelta(days=31)
    return sql, [BudgetAlert.Period.DAY, day, BudgetAlert.Period.MONTH, month]


_RECENT_SQL = """SELECT coalesce(jsonb_agg(jsonb_build_object(
    'id', id, 'period', period, 'period_start', period_start, 'threshold', threshold,
    'ceiling', ceiling::text, 'level', level::text, 'created_at', created_at, 'batch', batch
)), '[]')::text
FROM "{table}" WHERE owner_id = {owner} AND rearmed_at IS NULL
AND ((period = %s AND period_start >= %s) OR (period = %s AND period_start >= %s))"""


def _alert(owner_id: int, row: dict[str, Any]) -> BudgetAlert:
    return BudgetAlert(
        id=row["id"],
        owner_id=owner_id,
        period=row["period"],
        period_start=date.fromisoformat(row["period_start"]),
        threshold=row["threshold"],
        ceiling=Decimal(row["ceiling"]),
        level=Decimal(row["level"]),
        created_at=datetime.fromisoformat(row["created_at"]),
        batch=uuid.UUID(row["batch"]),
    )


def rearm(owner_id: int, *, now: datetime | None = None) -> int:
    """After a ceiling changed: the current periods' thresholds whose share of the new ceiling is
    above the level are armed again (`rearmed_at`; a threshold still below the level stays told).
    Returns how many were re-armed."""
    now = now or timezone.now()
    forget_standing(owner_id)
    summary = ledger.summarize(owner_id, now=now)
    rearmed = 0
    for lv in levels(summary, now):
        live = BudgetAlert.objects.filter(
            owner_id=owner_id, period=lv.period, period_start=lv.start, rearmed_at__isnull=True
        )
        above = [a.pk for a in live if lv.level * 100 < lv.ceiling * a.threshold]
        rearmed += BudgetAlert.objects.filter(pk__in=above).update(rearmed_at=now)
    return rearmed
