"""Writing a model step: the call about to be sent, as the run's open call, in one statement that
also checks the run is still this attempt's; then its usage, counters and transcript in one
statement while the run is still this attempt's (with the next call's opening when no tool that
waits came between them, runs.runtime). A run ended by someone else (Stop, the reaper)
while a call was on the wire has that call charged by whoever ended it (charge_open_call), so a
response that comes back too late is not written at all. The run loop (runs.runtime) decides what
a step is; this module only makes it durable, atomically (docs/contract.md#the-run-loop, rule 4).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import F

from accounting import alerts, ledger
from accounting.models import OwnerBudget
from runs.models import Run, TranscriptEntry

logger = logging.getLogger(__name__)

# One step, one statement: the ledger's CTEs, then the counters of the run and its ancestors,
# then the transcript rows, written only if the run is still this attempt's (`ours`).
# Everything hangs on `ours`: the run's own counters are updated only while it is still this
# attempt's (re-checked on the row as it is when the update takes its lock, so a reaper that
# committed meanwhile wins), and the ledger, rollups, ancestors and transcript are written only
# if that update was. A late response writes nothing: its call was charged when the run was ended.
# When the next call is already known (no tool that waits came between, runs.tools.Tool.instant),
# the same statement records it as the run's open call, as open_call's statement would (_OPEN_SQL).
_STEP_SQL = """
WITH ours AS (
    UPDATE {runs} SET steps = steps + 1, model_calls = model_calls + 1,
        cost = cost + %s, tool_calls = tool_calls + %s, open_call = %s::jsonb, partial_text = '',
        synthesis_dimension = CASE WHEN synthesis_dimension = '' THEN %s ELSE synthesis_dimension END,
        synthesis_step = CASE WHEN synthesis_dimension = '' AND %s <> '' THEN %s ELSE synthesis_step END
    WHERE id = %s AND status = %s AND attempt = %s::uuid
    RETURNING id
),
{ledger},
{ancestors}transcript AS (
    INSERT INTO {transcript} (run_id, seq, step, role, content, tool_calls, tool_call_id, tool_name,
        is_error, created_at)
    SELECT %s, t.seq, t.step, t.role, t.content, t.tool_calls, t.tool_call_id, t.tool_name, t.is_error, %s
    FROM json_to_recordset(%s::json) AS t(seq integer, step integer, role text, content text,
        tool_calls jsonb, tool_call_id text, tool_name text, is_error boolean)
    WHERE EXISTS (SELECT 1 FROM ours)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ours)
"""
# A transcript row's columns as the step sends them: the rows travel as one JSON parameter (psycopg
# adapts a typed array per column in Python, at several times the cost of one string).
_ROW = ("seq", "step", "role", "content", "tool_calls", "tool_call_id", "tool_name", "is_error")
# A delegated child's step counts against its ancestors too; a run with none plans no such update.
_ANCESTORS_SQL = """ancestors AS (
    UPDATE {runs} SET steps = steps + 1, model_calls = model_calls + 1,
        cost = cost + %s, tool_calls = tool_calls + %s
    WHERE id = ANY(%s::bigint[]) AND EXISTS (SELECT 1 FROM ours)
    RETURNING 1
),
"""


@dataclasses.dataclass(frozen=True)
class Opening:
    """The next call, recorded as open with the step before it (open_call's arguments)."""

    call_id: str
    bound: ledger.Call
    synthesis: str = ""


@dataclasses.dataclass(frozen=True)
class Step:
    """A step's one statement, ready to send (step_statement), and the call it charges."""

    sql: str
    params: list[Any]
    call: ledger.Call


def write_step(step: Step) -> bool:
    """One step (step_statement), if the run is still this attempt's: its own transaction (outside
    a caller's). Returns whether it was written: not when the run was ended meanwhile, whose ender
    charged the call's bound."""
    (on_time,), _ = _execute_with_generic_plan(step.sql, step.params)
    if on_time:
        judge_alerts(step.call)
    return bool(on_time)


def write_step_then(step: Step, sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    """In a caller's transaction: `step`, then the statement `sql`, in one round trip and on the
    step's plan setting (the run's end: its last step and its end, runs.services.finish_run; an
    update by primary key, which no generic plan makes worse). Returns the row `sql` returns."""
    assert connection.in_atomic_block, "the step and what follows it commit together"
    (on_time,), row = _execute_with_generic_plan(step.sql, step.params, then=(sql, params))
    if on_time:
        judge_alerts(step.call)
    return row


def step_statement(
    run: Run,
    attempt: Any,
    ancestors: list[int],
    call: ledger.Call,
    tool_calls: int,
    rows: list[TranscriptEntry],
    *,
    opening: Opening | None = None,
) -> Step:
    """One step as one statement, writing only if the run is still this attempt's: the ledger's
    CTEs (accounting.ledger), the counters of the run and its ancestors, and the transcript rows;
    the call is no longer open, or the `opening` one is."""
    ledger_ctes, ledger_params = ledger.usage_ctes(call, when="EXISTS (SELECT 1 FROM ours)")
    runs = Run._meta.db_table
    sql = _STEP_SQL.format(
        ledger=", ".join(ledger_ctes),
        ancestors=_ANCESTORS_SQL.format(runs=runs) if ancestors else "",
        runs=runs,
        transcript=TranscriptEntry._meta.db_table,
    )
    record = _record(opening.call_id, opening.bound, ancestors) if opening else None
    synthesis = opening.synthesis if opening else ""
    step = opening.bound.step if opening else 0
    params: list[Any] = [call.cost, tool_calls, record, synthesis, synthesis, step]
    params += [run.pk, Run.Status.RUNNING, attempt]
    params += ledger_params
    if ancestors:
        params += [call.cost, tool_calls, ancestors]
    params += [run.pk, call.at, json.dumps([{name: getattr(r, name) for name in _ROW} for r in rows])]
    return Step(sql, params, call)


# For the rest of the transaction: in its own (a pipeline's), until the Sync that commits it. A function
# call, not SET LOCAL, which outside BEGIN would warn in the server's log at every step.
_GENERIC_PLAN = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"


def _execute_with_generic_plan(
    sql: str, params: list[Any], *, then: tuple[str, list[Any]] | None = None
) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
    """Run the step's statement with the plan PostgreSQL made once for it on this connection.

    The product's sessions plan each execution for its values (plan_cache_mode=force_custom_plan,
    config/settings.py: a generic plan cannot use a partial index whose condition is a parameter).
    The step statement touches no such index, and planning its CTEs took about as long as running
    them, on every step. So it alone runs on the prepared statement's generic plan, set for it and
    set back in the same round trip (psycopg's pipeline mode). In its own transaction that is two
    messages, the setting and the statement, and no BEGIN or COMMIT: what a pipeline sends before
    the Sync that ends it is one transaction (the extended protocol's implicit one), committed at
    the Sync, and a setting local to it lasts until then. Inside a caller's transaction (the
    run's end, a test's): the setting around the statement and the statement `then` after it, if
    any. Returns the statement's row and `then`'s (None if it returned none)."""
    connection.ensure_connection()
    session = connection.connection
    own = not connection.in_atomic_block
    with connection.wrap_database_errors, connection.cursor() as cursor, connection.cursor() as after:
        try:
            with session.pipeline():
                session.execute(_GENERIC_PLAN)
                cursor.execute(sql, params)
                if then is not None:  # a statement of the same kind: a pk's row, no partial index
                    after.execute(*then)
                if not own:
                    session.execute("SET LOCAL plan_cache_mode TO DEFAULT")
            following = after.fetchone() if then is not None else None
            return tuple(cursor.fetchone()), None if following is None else tuple(following)
        except Exception:
            if own:  # should anything be left open; a caller's transaction rolls back on its own
                session.rollback()
            raise


# Before each model request: the run is still this attempt's (else the loop stops), and the call
# about to be sent is recorded as open, with the worst case it can cost; the first synthesis-only
# request also records its dimension and step. One statement, the loop's only one before a call.
# It also reads the owner's time zone, for a tool that tells the time (clock.now): a run's first
# statement, so that tool costs no read of its own.
# Its commit does not wait for the disk (synchronous_commit off for this transaction alone): it is
# visible at once, and only a crash of the database server within a fraction of a second of it can
# lose it: the worker, whose connection that crash breaks, leaves the run to the reaper
# (runs.runtime, the database gone), which then finds no open call to charge. That is a call opened
# on its own (a run's first, one after a tool that waits, a retry); an opening that goes with a
# step, and the step that charges a call, wait for the disk as every money write does.
_OPEN_SQL = f"""
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE {Run._meta.db_table} SET open_call = %s::jsonb, partial_text = '',
    synthesis_dimension = CASE WHEN synthesis_dimension = '' THEN %s ELSE synthesis_dimension END,
    synthesis_step = CASE WHEN synthesis_dimension = '' AND %s <> '' THEN %s ELSE synthesis_step END
WHERE id = %s AND status = 'running' AND attempt = %s::uuid AND EXISTS (SELECT FROM relaxed)
RETURNING (SELECT timezone FROM {OwnerBudget._meta.db_table} WHERE owner_id = {Run._meta.db_table}.owner_id)
"""  # noqa: S608 - the table name from model metadata


def open_call(
    run: Run, attempt: Any, call_id: str, bound: ledger.Call, ancestors: list[int], *, synthesis: str
) -> str | None:
    """Record the call about to be sent (its `bound`: what it is charged should its worker be lost
    while it is on the wire), if the run is still this attempt's, and return the owner's time zone
    as stored ("" before they have a budget row); None when it is not (stopped, reaped or
    deleted): nothing is sent then."""
    record = _record(call_id, bound, ancestors)
    with connection.cursor() as cursor:
        cursor.execute(_OPEN_SQL, [record, synthesis, synthesis, bound.step, run.pk, attempt])
        row = cursor.fetchone()
    return None if row is None else row[0] or ""


def _record(call_id: str, bound: ledger.Call, ancestors: list[int]) -> str:
    """A run's open call as stored: what charge_open_call charges, and to whom."""
    return json.dumps({"id": call_id, "ancestors": ancestors, "bound": bound.to_json()})


def charge_open_call(run: Run, *, basis: str) -> ledger.Call | None:
    """The call a run had on the wire when someone else ended it (Stop, the reaper), charged its
    bound: the provider may have generated up to the call's cap, and nobody saw its usage
    (docs/decisions/0006-streaming.md). Once: this takes the open call, and the loop, if its
    worker comes back with the answer, finds it taken and charges nothing. In the caller's
    transaction, which ends the run and tells its end."""
    record = (
        Run.objects.select_for_update(of=("self",))
        .filter(pk=run.pk, open_call__isnull=False)
        .values_list("open_call", flat=True)
        .first()
    )
    if record is None:
        return None
    Run.objects.filter(pk=run.pk).update(open_call=None, partial_text="")
    bound = ledger.Call.from_json(record["bound"])
    call = dataclasses.replace(bound, prices={**bound.prices, "basis": basis})
    ledger.record_usage(call)
    Run.objects.filter(pk__in=[run.pk, *record["ancestors"]]).update(**_counters(call.cost, 0))
    judge_alerts(call)
    return call


def judge_alerts(call: ledger.Call) -> None:
    """After a charge: has the owner's spend crossed an alert threshold (accounting.alerts)? An
    alert that cannot be judged is logged; it never fails the run that paid."""
    if call.cost <= 0:
        return
    try:
        alerts.judge_owner(call.owner_id, call.cost)
    except Exception:
        logger.exception("judging budget alerts for owner %s failed", call.owner_id)


def _counters(cost: Decimal, tool_calls: int) -> dict[str, Any]:
    return {
        "steps": F("steps") + 1,
        "model_calls": F("model_calls") + 1,
        "cost": F("cost") + cost,
        "tool_calls": F("tool_calls") + tool_calls,
    }
