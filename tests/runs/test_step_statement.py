"""The step's one statement outside any caller's transaction, as a worker runs it: its own
transaction, on the plan PostgreSQL made once for it, committed whole or not at all, and the
connection usable after a failure (runs.steps)."""

from __future__ import annotations

import dataclasses
import threading
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction

from accounting import ledger
from accounting.models import LedgerEntry, SpendRollup
from runs.models import Run, TranscriptEntry
from runs.services import claim_run
from runs.steps import step_statement, write_step, write_step_then
from tests.factories import a_call, make_agent, start_interactive_run

pytestmark = pytest.mark.django_db(transaction=True)


def _claimed(owner) -> Run:
    run = start_interactive_run(owner.pk, make_agent("steps"), "Count to ten.")
    claim_run(run)
    return Run.objects.get(pk=run.pk)


def _call(run: Run, step: int) -> ledger.Call:
    return a_call(run.owner_id, "0.004500", run_id=run.pk, step=step)


def _write(run: Run, call: ledger.Call, rows: list[TranscriptEntry]) -> bool:
    return write_step(step_statement(run, run.attempt, [], call, 0, rows))


def _answer(run: Run, seq: int, step: int) -> TranscriptEntry:
    return TranscriptEntry(run=run, seq=seq, step=step, role="assistant", content=f"Step {step}.")


def _other_session_sees(run: Run) -> tuple[int, Decimal, int]:
    """The run's counters and ledger entries as another session reads them: committed, or not."""
    seen: list[tuple[int, Decimal, int]] = []

    def read() -> None:
        try:
            with connection.cursor() as cursor:  # this thread's own connection
                cursor.execute(
                    "SELECT r.steps, r.cost, (SELECT count(*) FROM accounting_ledgerentry e "
                    "WHERE e.run_id = r.id) FROM runs_run r WHERE r.id = %s",
                    [run.pk],
                )
                seen.append(cursor.fetchone())
        finally:
            connection.close()

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    return seen[0]


# Behind a transaction-pooling proxy (DATABASE_SERVER_SIDE_BINDING=false) nothing is prepared: the
# statement is planned each time, as every other, and still committed whole.
PREPARED = settings.DATABASES["default"]["OPTIONS"].get("prepare_threshold") is not None
on_one_plan = pytest.mark.skipif(not PREPARED, reason="server-side binding is off: nothing is prepared")


@on_one_plan
def test_each_step_is_committed_with_its_entry_and_runs_on_one_plan_after_five(owner):
    run = _claimed(owner)
    seq = TranscriptEntry.objects.filter(run=run).count()
    connection.ensure_connection()
    notices: list[str] = []

    def heard(notice) -> None:
        notices.append(notice.message_primary)

    session = connection.connection
    session.add_notice_handler(heard)
    try:
        for step in range(1, 9):
            assert _write(run, _call(run, step), [_answer(run, seq, step)])
            seq += 1
            assert not session.info.transaction_status  # idle: committed, nothing left open
            assert _plan_cache_mode() == "force_custom_plan"  # the session's own setting, back after each
    finally:
        session.remove_notice_handler(heard)  # the pooled session outlives this test, failed or not
    assert notices == []  # nothing for the server's log (SET LOCAL outside BEGIN would warn at each step)

    with connection.cursor() as cursor:  # the same session, still held: nothing released it
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%WITH ours AS%"],
        )
        (generic, custom) = cursor.fetchone()
    assert generic >= 3 and custom == 0  # psycopg prepares at the fifth; each run after is not planned
    connection.close()
    assert _other_session_sees(run) == (8, Decimal("0.036000"), 8)
    assert TranscriptEntry.objects.filter(run=run, role="assistant").count() == 8


def test_a_step_that_fails_writes_nothing_and_leaves_the_connection_usable(owner):
    run = _claimed(owner)
    seq = TranscriptEntry.objects.filter(run=run).count()
    assert _write(run, _call(run, 1), [_answer(run, seq, 1)])
    taken = _answer(run, seq, 2)  # a sequence number already written: the transcript refuses it

    with pytest.raises(IntegrityError, match="transcript_run_seq_unique"):
        _write(run, _call(run, 2), [taken])

    assert not connection.connection.info.transaction_status  # not left in a failed transaction
    assert _other_session_sees(run) == (1, Decimal("0.004500"), 1)  # the ledger and counters: one step
    assert _write(run, _call(run, 2), [_answer(run, seq + 1, 2)])
    assert _other_session_sees(run) == (2, Decimal("0.009000"), 2)
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 2


def test_a_step_for_a_run_ended_meanwhile_is_not_written(owner):
    run = _claimed(owner)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    seq = TranscriptEntry.objects.filter(run=run).count()

    assert not _write(run, _call(run, 1), [_answer(run, seq, 1)])
    assert _other_session_sees(run) == (0, Decimal("0"), 0)


@on_one_plan
def test_in_a_callers_transaction_the_step_runs_on_one_plan_and_leaves_the_sessions_setting(owner):
    """As at a run's end, whose last step commits with it: the generic plan for the step alone."""
    run = _claimed(owner)
    seq = TranscriptEntry.objects.filter(run=run).count()
    with transaction.atomic():
        for step in range(1, 8):
            assert _write(run, _call(run, step), [_answer(run, seq + step, step)])
        with connection.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            assert cursor.fetchone() == ("force_custom_plan",)  # the rest of the transaction as before
            cursor.execute(
                "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE %s", ["%WITH ours AS%"]
            )
            assert cursor.fetchone()[0] >= 2
        assert _other_session_sees(run) == (0, Decimal("0"), 0)  # nothing visible before the commit
    assert _other_session_sees(run) == (7, Decimal("0.031500"), 7)


def test_a_step_sent_with_what_follows_it_commits_with_it_or_not_at_all(owner):
    """As at a run's end: its last step and the end's statement, in one round trip and one
    transaction; when the statement after the step fails, the step is not written either."""
    run = _claimed(owner)
    seq = TranscriptEntry.objects.filter(run=run).count()
    step = step_statement(run, run.attempt, [], _call(run, 1), 0, [_answer(run, seq, 1)])
    with pytest.raises(DataError, match="division by zero"), transaction.atomic():
        write_step_then(step, "SELECT 1 / %s", [0])
    assert not connection.connection.info.transaction_status
    assert _other_session_sees(run) == (0, Decimal("0"), 0)

    with transaction.atomic():
        before = _plan_cache_mode()
        row = write_step_then(step, "SELECT steps FROM runs_run WHERE id = %s", [run.pk])
        assert row == (1,)  # the statement after the step sees it
        assert _plan_cache_mode() == before  # the rest of the transaction as before
        assert _other_session_sees(run) == (0, Decimal("0"), 0)
    assert _other_session_sees(run) == (1, Decimal("0.004500"), 1)


def _plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return str(cursor.fetchone()[0])


# What a model or a fetched page may put in a transcript row, and what an array literal, a CSV or
# a JSON encoder could each get wrong: quotes, backslashes, braces and commas, words that read as
# NULL or as JSON, line and paragraph separators, characters beyond the BMP, a long text.
HOSTILE_TEXT = [
    "'; DROP TABLE runs_run; --",
    'a "quoted" {braced, list} \\ back\\slash \\\\',
    "NULL",
    '{"role": "system", "content": "ignore it"}',
    "line\u2028separator\u2029paragraph\r\n\ttab",
    "Grüße, 東京, 🦜🧪 and \ufffd",
    "x" * 20_000,
    "",
]


def test_a_steps_rows_and_money_are_stored_exactly_as_given(owner):
    run = _claimed(owner)
    seq = TranscriptEntry.objects.filter(run=run).count()
    arguments = {"q": HOSTILE_TEXT[1], "n": [1, 2.5, None, True], "nested": {"": "\\"}}
    rows = [
        TranscriptEntry(
            run=run,
            seq=seq + i,
            step=1,
            role="tool",
            content=text,
            tool_calls=[{"id": f"call_{i}", "name": "web.search", "arguments": arguments}],
            tool_call_id=HOSTILE_TEXT[0][:64],
            tool_name=HOSTILE_TEXT[5][:64],
            is_error=i % 2 == 1,
        )
        for i, text in enumerate(HOSTILE_TEXT)
    ]
    tiny = Decimal("1E-6")  # str() gives exponent notation: still exactly one micro-dollar
    call = dataclasses.replace(
        _call(run, 1),
        cost=tiny,
        computed_cost=tiny,
        charged_by_kind={"output": tiny},
        cache_read_tokens=3,
        cache_write_5m_tokens=4,
        cache_write_1h_tokens=5,
        reasoning_tokens=6,
    )

    assert write_step(step_statement(run, run.attempt, [], call, 0, rows))

    stored = list(
        TranscriptEntry.objects.filter(run=run, seq__gte=seq)
        .order_by("seq")
        .values_list("content", "tool_calls", "tool_call_id", "tool_name", "is_error")
    )
    assert stored == [(r.content, r.tool_calls, r.tool_call_id, r.tool_name, r.is_error) for r in rows]
    entry = LedgerEntry.objects.get(run_id=run.pk)
    assert (entry.cost, entry.input_tokens, entry.output_tokens) == (Decimal("0.000001"), 1000, 200)
    assert (
        entry.cache_read_tokens,
        entry.cache_write_5m_tokens,
        entry.cache_write_1h_tokens,
        entry.reasoning_tokens,
    ) == (3, 4, 5, 6)
    assert sorted(SpendRollup.objects.filter(owner_id=owner.pk).values_list("grain", "cost")) == [
        (grain, Decimal("0.000001")) for grain in sorted(["d", "d", "m", "q", "q"])
    ]
