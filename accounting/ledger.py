"""The only writer of ledger entries, reservations and accounting events.

Callers own the transaction: usage is recorded in the same transaction as the run's counters,
and `schedule.run_accounted` in the same transaction as the run's terminal state.
"""

from __future__ import annotations

import json
import zoneinfo
from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone

from accounting import rollups
from accounting.models import (
    AccountingEvent,
    LedgerEntry,
    OwnerBudget,
    Reservation,
    SpendRollup,
    UsageRollup,
)
from accounting.money import format_money
from accounting.timezones import default_time_zone, owner_zone

ZERO = Decimal("0")


class AdmissionRefused(Exception):
    """The run does not fit under a ceiling; `message` says which and by how much."""

    def __init__(self, message: str, *, ceiling: str) -> None:
        super().__init__(message)
        self.message = message
        self.ceiling = ceiling


def budget_for(owner_id: int) -> OwnerBudget:
    """The owner's budget row, created on first use (get_or_create absorbs a concurrent first use)."""
    budget, _ = OwnerBudget.objects.get_or_create(
        owner_id=owner_id, defaults={"timezone": default_time_zone()}
    )
    return budget


# -- periods in the owner's time zone ------------------------------------------------------------


def day_bounds(day: date, zone: zoneinfo.ZoneInfo) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, tzinfo=zone)
    return start, datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone)


def month_bounds(day: date, zone: zoneinfo.ZoneInfo) -> tuple[datetime, datetime]:
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return datetime.combine(first, time.min, tzinfo=zone), datetime.combine(following, time.min, tzinfo=zone)


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

    def refusal(self, amount: Decimal) -> AdmissionRefused | None:
        """Why `amount` more would not fit under a ceiling, or None if it fits."""
        for label, ceiling, spent in (
            ("daily", self.daily_ceiling, self.spent_today),
            ("monthly", self.monthly_ceiling, self.spent_month),
        ):
            if spent + self.open_total + amount > ceiling:
                return AdmissionRefused(
                    f"the {label} ceiling of USD {ceiling:.2f} would be exceeded: spent USD {spent:.2f}, "
                    f"reserved USD {self.open_total:.2f}, this run needs USD {amount:.2f}",
                    ceiling=label,
                )
        return None

    def with_reservation(self, amount: Decimal) -> BudgetSummary:
        return replace(self, open_count=self.open_count + 1, open_total=self.open_total + amount)


def budget_row(owner_id: int, **columns: tuple[str, list[Any]]) -> OwnerBudget:
    """The owner's budget row with its open reservations (`open_count`, `open_total`), and any other
    `columns` (name: an SQL expression over the row `b`, and its parameters), in one plain
    statement: every owner page reads it, where building the same as a queryset cost three times
    the statement; created on the owner's first visit, when nothing is reserved yet."""
    extra = "".join(f", ({sql}) AS {name}" for name, (sql, _) in columns.items())
    params = [value for _, values in columns.values() for value in values]
    sql = _BUDGET_ROW_SQL.format(extra=extra)
    budget = next(iter(OwnerBudget.objects.raw(sql, [*params, owner_id])), None)
    if budget is None:
        budget_for(owner_id)
        budget = next(iter(OwnerBudget.objects.raw(sql, [*params, owner_id])))
    return budget


_BUDGET_ROW_SQL = f"""SELECT b.*, r.open_count, r.open_total{{extra}}
FROM "{OwnerBudget._meta.db_table}" b CROSS JOIN LATERAL (
    SELECT count(*) AS open_count, sum(amount) AS open_total FROM "{Reservation._meta.db_table}"
    WHERE owner_id = b.owner_id AND released_at IS NULL
) r
WHERE b.owner_id = %s"""  # noqa: S608 - model metadata


def summarize(
    owner_id: int, *, now: datetime | None = None, budget: OwnerBudget | None = None
) -> BudgetSummary:
    """Ceilings, spend today and this month (owner's time zone), and open reservations (two
    queries: the budget row with its open reservations, unless given by `budget_row`, then spend)."""
    budget = budget or budget_row(owner_id)
    # Annotated by budget_row.
    open_count, open_total = budget.open_count, budget.open_total  # type: ignore[attr-defined]
    reserved = {owner_id: {"count": open_count, "total": open_total}}
    return _combine([budget], _spend([budget], now or timezone.now()), reserved)[owner_id]


def _spend(budgets: list[OwnerBudget], now: datetime) -> dict[int, dict[str, Any]]:
    """{owner: {"today": …, "month": …}} in each owner's time zone, from the rollups: one plain
    statement per time zone, a few hundred rows per owner however busy (accounting.rollups)."""
    by_zone: dict[str, list[int]] = defaultdict(list)
    for budget in budgets:
        by_zone[budget.timezone].append(budget.owner_id)
    spent: dict[int, dict[str, Any]] = {}
    with connection.cursor() as cursor:
        for zone_name, owner_ids in by_zone.items():
            zone = owner_zone(zone_name)
            today = now.astimezone(zone).date()
            month, month_params = rollups.cover_sql(*month_bounds(today, zone))
            day, day_params = rollups.cover_sql(*day_bounds(today, zone))
            cursor.execute(
                _SPEND_SQL.format(month=month, day=day),
                [*month_params, *day_params, owner_ids, rollups.ALL, *month_params, *day_params],
            )
            spent.update({owner: {"month": m, "today": d} for owner, m, d in cursor.fetchall()})
    return spent


_SPEND_SQL = f"""SELECT owner_id, sum(cost) FILTER (WHERE {{month}}), sum(cost) FILTER (WHERE {{day}})
FROM "{SpendRollup._meta.db_table}" WHERE owner_id = ANY(%s) AND key = %s AND ({{month}} OR {{day}})
GROUP BY owner_id"""  # noqa: S608 - model metadata; the periods are rollups.cover_sql's


def _open_reservations(owner_ids: list[int]) -> dict[int, dict[str, Any]]:
    rows = (
        Reservation.objects.filter(owner_id__in=owner_ids, released_at__isnull=True)
        .values("owner_id")
        .annotate(count=Count("id"), total=Sum("amount"))
        .order_by()
    )
    return {row["owner_id"]: dict(row) for row in rows}


def _combine(
    budgets: list[OwnerBudget], spent: dict[int, dict[str, Any]], reserved: dict[int, dict[str, Any]]
) -> dict[int, BudgetSummary]:
    return {
        budget.owner_id: BudgetSummary(
            timezone=budget.timezone,
            daily_ceiling=budget.effective_daily_ceiling,
            monthly_ceiling=budget.effective_monthly_ceiling,
            spent_today=spent.get(budget.owner_id, {}).get("today") or ZERO,
            spent_month=spent.get(budget.owner_id, {}).get("month") or ZERO,
            open_count=int(reserved.get(budget.owner_id, {}).get("count") or 0),
            open_total=reserved.get(budget.owner_id, {}).get("total") or ZERO,
        )
        for budget in budgets
    }


# -- admission --------------------------------------------------------------------------------


class ReservationRequest(NamedTuple):
    """One run's reservation to make: whose, for which run, how much."""

    owner_id: int
    run_id: int
    amount: Decimal


@dataclass(frozen=True)
class Admission:
    """What reserve_many did: the refusals by run id, and where each owner stands after it (their
    budget rows, still locked, and summaries), for the threshold judgement (accounting.alerts)."""

    refusals: dict[int, AdmissionRefused]
    budgets: list[OwnerBudget]
    summaries: dict[int, BudgetSummary]
    admitted_owners: set[int]


def reserve_many(requests: list[ReservationRequest], *, now: datetime | None = None) -> Admission:
    """Admit runs against their owners' daily and monthly ceilings: reservations are written for
    those that fit, in order; the refusals are returned by run id. Admission with its threshold
    judgement is accounting.alerts.admit, which calls this.

    Exact under concurrency: the owners' budget rows are locked (in owner order, so two callers
    cannot deadlock) for the whole read-compare-insert. Open reservations are read before spend:
    a run releases its reservation only after its last usage committed, so a run ending meanwhile
    is counted twice at worst, never missed. Must run inside the caller's transaction; if the
    reservations cannot be written, the caller's runs never start.
    """
    now = now or timezone.now()
    owner_ids = sorted({request.owner_id for request in requests})
    _ensure_budgets(owner_ids)
    budgets = list(
        OwnerBudget.objects.select_for_update().filter(owner_id__in=owner_ids).order_by("owner_id")
    )
    reserved = _open_reservations(owner_ids)
    summaries = _combine(budgets, _spend(budgets, now), reserved)
    refusals: dict[int, AdmissionRefused] = {}
    rows: list[Reservation] = []
    for request in requests:
        summary = summaries[request.owner_id]
        refusal = summary.refusal(request.amount)
        if refusal is not None:
            refusals[request.run_id] = refusal
            continue
        summaries[request.owner_id] = summary.with_reservation(request.amount)
        rows.append(
            Reservation(
                owner_id=request.owner_id, run_id=request.run_id, amount=request.amount, created_at=now
            )
        )
    _insert_reservations(rows)
    return Admission(refusals, budgets, summaries, {row.owner_id for row in rows})


def _insert_reservations(rows: list[Reservation]) -> None:
    """A batch of reservations in one statement, from arrays (a tick admits hundreds at once, and
    a model instance per row costs more than the insert)."""
    if len(rows) < 2:
        Reservation.objects.bulk_create(rows)
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{Reservation._meta.db_table}" (owner_id, run_id, amount, created_at) '  # noqa: S608
            "SELECT * FROM unnest(%s::integer[], %s::bigint[], %s::numeric[], %s::timestamptz[])",
            [
                [row.owner_id for row in rows],
                [row.run_id for row in rows],
                [row.amount for row in rows],
                [row.created_at for row in rows],
            ],
        )


def reserve(owner_id: int, *, run_id: int, amount: Decimal, now: datetime | None = None) -> None:
    """One run's reservation; raises AdmissionRefused when it does not fit. (Without the threshold
    judgement: admission is accounting.alerts.admit_one.)"""
    refusals = reserve_many([ReservationRequest(owner_id, run_id, amount)], now=now).refusals
    if run_id in refusals:
        raise refusals[run_id]


def _ensure_budgets(owner_ids: list[int]) -> None:
    existing = set(OwnerBudget.objects.filter(owner_id__in=owner_ids).values_list("owner_id", flat=True))
    missing = [
        OwnerBudget(owner_id=owner_id, timezone=default_time_zone())
        for owner_id in owner_ids
        if owner_id not in existing
    ]
    if missing:
        OwnerBudget.objects.bulk_create(missing, ignore_conflicts=True)


def release(run_id: int, *, now: datetime | None = None) -> bool:
    """Release the run's reservation. Idempotent: True only for the call that released it."""
    return (
        Reservation.objects.filter(run_id=run_id, released_at__isnull=True).update(
            released_at=now or timezone.now()
        )
        == 1
    )


def release_cte(ended: str) -> str:
    """`release` as a data-modifying CTE named `released`, for the statement that ends a run (runs.services):
    the reservation of the run the CTE `ended` returns (its `id`), released at the one parameter it takes."""
    table = Reservation._meta.db_table
    return (
        f'released AS (UPDATE "{table}" SET released_at = %s '  # noqa: S608 - model metadata, our CTE name
        f"WHERE released_at IS NULL AND run_id IN (SELECT id FROM {ended}) RETURNING 1)"
    )


# -- usage and events -------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One provider call as the ledger records it (see LedgerEntry): tokens by kind, what it was
    charged (`cost`: the provider's reported charge when there is one, else `computed_cost`), the
    split of that charge by kind, and the price sheet it was computed with."""

    owner_id: int
    run_id: int
    schedule_id: int | None
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cost: Decimal
    at: datetime
    step: int | None = None
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0
    computed_cost: Decimal | None = None
    reported_cost: Decimal | None = None
    charged_by_kind: dict[str, Decimal] = field(default_factory=dict)
    prices: dict[str, Any] = field(default_factory=dict)
    estimated: bool = False  # cut before its usage arrived: an estimate that never undercounts

    @property
    def tokens(self) -> list[int]:
        return [
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_5m_tokens,
            self.cache_write_1h_tokens,
            self.reasoning_tokens,
        ]

    def to_json(self) -> dict[str, Any]:
        """The call as JSON (money as strings): a call on the wire is kept so, to be charged later
        if its worker is lost (runs.steps.charge_open_call)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["at"] = self.at.isoformat()
        values["charged_by_kind"] = {kind: str(amount) for kind, amount in self.charged_by_kind.items()}
        for name in ("cost", "computed_cost", "reported_cost"):
            values[name] = None if values[name] is None else str(values[name])
        return values

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Call:
        money = {
            name: None if values.get(name) is None else Decimal(values[name])
            for name in ("cost", "computed_cost", "reported_cost")
        }
        return cls(
            **{
                **values,
                **money,
                "at": datetime.fromisoformat(values["at"]),
                "charged_by_kind": {
                    kind: Decimal(amount) for kind, amount in values["charged_by_kind"].items()
                },
            }
        )


def record_usage(call: Call) -> int:
    """One provider call's ledger entry, with its cost added to the owner's spend rollups and its
    tokens and cost by kind to the usage rollups, in one statement; returns the entry's id. The
    caller updates the run's counters in the same transaction (or writes all of it in one
    statement with `usage_ctes`: the run loop's step)."""
    ctes, params = usage_ctes(call, when="TRUE")
    with connection.cursor() as cursor:
        cursor.execute("WITH " + ", ".join(ctes) + " SELECT id FROM ledger_entry", params)  # noqa: S608
        (entry_id,) = cursor.fetchone()
    return int(entry_id)


# The usage rollup rows of a ledger entry, from the entry as inserted: its UTC quarter-hour and
# day, the same buckets accounting.rollups computes in Python (check_rollups compares them).
_USAGE_ROLLUP_SQL = """INSERT INTO "{table}" AS r (owner_id, provider, model, grain, start, calls, cost,
    input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, output_tokens,
    reasoning_tokens, cost_input, cost_cache_read, cost_cache_write, cost_output)
SELECT e.owner_id, e.provider, e.model, b.grain, b.start, 1, e.cost, e.input_tokens, e.cache_read_tokens,
    e.cache_write_5m_tokens, e.cache_write_1h_tokens, e.output_tokens, e.reasoning_tokens,
    coalesce((e.charged_by_kind->>'input')::numeric, 0),
    coalesce((e.charged_by_kind->>'cache_read')::numeric, 0),
    coalesce((e.charged_by_kind->>'cache_write_5m')::numeric, 0)
        + coalesce((e.charged_by_kind->>'cache_write_1h')::numeric, 0),
    coalesce((e.charged_by_kind->>'output')::numeric, 0)
FROM ledger_entry e, LATERAL (VALUES
    ('q', date_bin('15 minutes', e.created_at, timestamptz '2000-01-01 00:00+00')),
    ('d', date_bin('1 day', e.created_at, timestamptz '2000-01-01 00:00+00'))
) AS b(grain, start)
ON CONFLICT (owner_id, grain, start, provider, model) DO UPDATE SET
    calls = r.calls + 1, cost = r.cost + excluded.cost,
    input_tokens = r.input_tokens + excluded.input_tokens,
    cache_read_tokens = r.cache_read_tokens + excluded.cache_read_tokens,
    cache_write_5m_tokens = r.cache_write_5m_tokens + excluded.cache_write_5m_tokens,
    cache_write_1h_tokens = r.cache_write_1h_tokens + excluded.cache_write_1h_tokens,
    output_tokens = r.output_tokens + excluded.output_tokens,
    reasoning_tokens = r.reasoning_tokens + excluded.reasoning_tokens,
    cost_input = r.cost_input + excluded.cost_input,
    cost_cache_read = r.cost_cache_read + excluded.cost_cache_read,
    cost_cache_write = r.cost_cache_write + excluded.cost_cache_write,
    cost_output = r.cost_output + excluded.cost_output"""


def usage_ctes(call: Call, *, when: str) -> tuple[list[str], list[Any]]:
    """`record_usage` as data-modifying CTEs (`ledger_entry`, `ledger_rollup`, `usage_rollup`),
    for a caller that writes them in one statement with its own rows (the run loop's step: one
    round trip, no explicit transaction), only if the SQL condition `when` holds (the caller's
    own CTEs decide it)."""
    entry = LedgerEntry._meta.db_table
    columns = (
        "created_at, owner_id, run_id, schedule_id, step, provider, model, input_tokens, output_tokens, "
        "cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, cost, "
        "computed_cost, reported_cost, charged_by_kind, prices, estimated"
    )
    rollup, params = rollup_sql(
        rollups.buckets(call.owner_id, call.schedule_id, call.at, call.cost), when=when
    )
    ctes = [
        f'ledger_entry AS (INSERT INTO "{entry}" ({columns}) '
        "SELECT %s::timestamptz, %s::integer, %s::bigint, %s::bigint, %s::integer, %s::text, %s::text, "
        "%s::integer, %s::integer, %s::integer, %s::integer, %s::integer, %s::integer, "
        "%s::numeric, %s::numeric, %s::numeric, %s::jsonb, %s::jsonb, %s::boolean "
        f"WHERE {when} RETURNING *)",
        f"ledger_rollup AS ({rollup} RETURNING 1)",
        f"usage_rollup AS ({_USAGE_ROLLUP_SQL.format(table=UsageRollup._meta.db_table)} RETURNING 1)",
    ]
    values = [
        call.at,
        call.owner_id,
        call.run_id,
        call.schedule_id,
        call.step,
        call.provider,
        call.model,
        *call.tokens,
        call.cost,
        call.computed_cost,
        call.reported_cost,
        json.dumps({kind: format_money(amount) for kind, amount in call.charged_by_kind.items()}),
        json.dumps(call.prices),
        call.estimated,
    ]
    return ctes, [*values, *params]


def rollup_sql(rows: list[rollups.Bucket], *, when: str = "") -> tuple[str, list[Any]]:
    """One statement adding each bucket's cost to its rollup row, creating the row if needed
    or, with `when`, only if that SQL condition holds.
    Rows are locked in the order given (rollups.buckets sorts)."""
    table = SpendRollup._meta.db_table
    if when:
        # One JSON parameter whatever the number of rows: the run loop's step statement stays under
        # psycopg's limit for caching a statement's parsing (50 parameters), and one string costs
        # far less to send than a typed array per column (psycopg adapts arrays in Python).
        source = (
            "SELECT * FROM json_to_recordset(%s::json) AS r(owner_id integer, key bigint, grain text, "  # noqa: S608
            f"start timestamptz, cost numeric) WHERE {when}"
        )
        params: list[Any] = [
            json.dumps(
                [
                    {
                        "owner_id": r.owner_id,
                        "key": r.key,
                        "grain": r.grain,
                        "start": r.start.isoformat(),
                        "cost": str(r.cost),
                    }
                    for r in rows
                ]
            )
        ]
    else:
        source = "VALUES " + ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
        params = [value for r in rows for value in (r.owner_id, r.key, r.grain, r.start, r.cost)]
    sql = (
        f'INSERT INTO "{table}" (owner_id, key, grain, start, cost) {source} '
        f'ON CONFLICT (owner_id, key, grain, start) DO UPDATE SET cost = "{table}".cost + excluded.cost'
    )
    return sql, params


def record_run_accounted(
    *,
    owner_id: int,
    schedule_id: int,
    run_id: int,
    payload: dict[str, Any],
    at: datetime | None = None,
    kind: str = AccountingEvent.Kind.RUN_ACCOUNTED,
) -> AccountingEvent:
    """`schedule.run_accounted` (content-free; written with the run's terminal state), or with
    `kind` LATE_USAGE the usage of a response that arrived after it."""
    return AccountingEvent.objects.create(
        event=kind,
        created_at=at or timezone.now(),
        owner_id=owner_id,
        schedule_id=schedule_id,
        run_id=run_id,
        payload=payload,
    )
