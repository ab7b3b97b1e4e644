"""A call the provider answered was billed, whatever happens to its step afterwards. When the
database refuses the step that records it (here a trigger, as a constraint or a full disk would),
the run still ends, as an internal error, and the call is charged its bound: never recorded as
free. When the connection is lost instead, the reaper ends the run and charges it. A provider's
error response is not billed, and leaves nothing charged."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from accounting.models import LedgerEntry, Reservation
from runs.models import Run
from runs.services import fail_lost_runs
from tests.runs.wire import FETCH, OPENAI, WIRES, Provider, execute, ledger_total, make_wire_agent, news_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("example_com_allowed")]


REFUSE = "RAISE EXCEPTION 'disk full (simulated)'"
DROP_CONNECTION = "PERFORM pg_terminate_backend(pg_backend_pid())"


@pytest.fixture
def refused_step(request: pytest.FixtureRequest) -> Iterator[None]:
    """The database refuses to record the first step's answer (its transcript row), or the
    connection is lost while it does (the parameter, when given)."""
    action = getattr(request, "param", REFUSE)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION refuse_first_step() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.step = 1 AND NEW.role = 'assistant' THEN
                    {action};
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_first_step BEFORE INSERT ON runs_transcriptentry
                FOR EACH ROW EXECUTE FUNCTION refuse_first_step();
            """
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER refuse_first_step ON runs_transcriptentry; DROP FUNCTION refuse_first_step();"
        )


def _ended_with_its_call_charged(run: Run) -> LedgerEntry:
    assert run.status == Run.Status.FAILED and run.failure_reason == "internal_error"
    assert run.open_call is None
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.estimated and "failed before its answered call was recorded" in entry.prices["basis"]
    assert run.model_calls == 1 and run.cost == entry.cost == ledger_total(run)
    assert not Reservation.objects.filter(run_id=run.pk, released_at__isnull=True).exists()
    return entry


@pytest.mark.usefixtures("refused_step")
def test_a_step_refused_before_its_tool_runs_is_charged_its_bound(owner):
    provider = Provider(OPENAI.tools(FETCH, usage=(900, 40)), OPENAI.answer(), web=news_page)
    run = execute(owner, make_wire_agent(OPENAI, tools=["http.fetch"]), provider)

    entry = _ended_with_its_call_charged(run)
    # The bound: its usage at the agent's prices (USD 3 and 15 per million) would be USD 0.003300.
    assert entry.cost > Decimal("0.003300") and entry.output_tokens >= 40
    assert len(provider.requests) == 1 and not provider.fetches  # the tool did not run


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.usefixtures("refused_step")
def test_an_answer_refused_in_the_runs_end_is_charged_its_bound(owner, wire):
    provider = Provider(wire.answer(usage=(1200, 90)))
    run = execute(owner, make_wire_agent(wire), provider)

    entry = _ended_with_its_call_charged(run)
    assert entry.cost > 0 and run.answer == ""
    assert "Internal error" in run.failure_message and "disk full" not in run.failure_message


@pytest.mark.usefixtures("refused_step")
def test_a_step_refused_with_the_next_calls_opening_is_charged_and_the_next_call_not_sent(owner):
    provider = Provider(OPENAI.tools(("clock_now", {}), usage=(900, 40)), OPENAI.answer())
    run = execute(owner, make_wire_agent(OPENAI, tools=["clock.now"]), provider)

    _ended_with_its_call_charged(run)
    assert len(provider.requests) == 1


@pytest.mark.parametrize("refused_step", [DROP_CONNECTION], ids=["lost"], indirect=True)
@pytest.mark.usefixtures("refused_step")
def test_a_connection_lost_while_the_step_is_written_leaves_the_run_to_the_reaper_which_charges_it(owner):
    """The database went away (restarted) under the worker: it can vouch for nothing more, as a
    lost worker cannot. The run stays in flight with its answered call open; the reaper fails it
    and charges that call's bound, once."""
    provider = Provider(OPENAI.tools(FETCH, usage=(900, 40)), OPENAI.answer(), web=news_page)
    with pytest.raises(OperationalError):
        execute(owner, make_wire_agent(OPENAI, tools=["http.fetch"]), provider)
    connection.close()  # the broken one; the next query opens another, as the worker's next task would

    run = Run.objects.get()
    assert run.status == Run.Status.RUNNING and run.open_call and run.cost == 0
    assert fail_lost_runs(now=timezone.now() + timedelta(hours=1)) == [run.pk]
    run.refresh_from_db()
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert (run.status, run.failure_reason) == ("failed", "worker_lost") and run.open_call is None
    assert entry.estimated and run.cost == entry.cost > Decimal("0.003300")
    # The server did not restart (the connection alone was cut): nothing tells the worker was well.
    assert run.failure_message.startswith("The worker stopped sending heartbeats")


@pytest.mark.parametrize("refused_step", [DROP_CONNECTION], ids=["lost"], indirect=True)
@pytest.mark.usefixtures("refused_step")
def test_a_run_in_flight_when_the_database_restarted_says_so_not_that_its_worker_stopped(owner, owner_client):
    """Its last heartbeat is older than the database server's start: the worker's connection broke
    with the restart and the worker left the run to the reaper, as above. The owner reads that the
    database restarted, and when, not that the worker stopped heartbeating."""
    provider = Provider(OPENAI.tools(FETCH, usage=(900, 40)), OPENAI.answer(), web=news_page)
    with pytest.raises(OperationalError):
        execute(owner, make_wire_agent(OPENAI, tools=["http.fetch"]), provider)
    connection.close()
    with connection.cursor() as cursor:  # what a restart leaves: the heartbeat before the server's start
        cursor.execute(
            "UPDATE runs_run SET heartbeat_at = pg_postmaster_start_time() - interval '5 seconds' "
            "RETURNING to_char(pg_postmaster_start_time() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"
        )
        (started,) = cursor.fetchone()

    run = Run.objects.get()
    assert fail_lost_runs(now=timezone.now() + timedelta(hours=1)) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("failed", "worker_lost") and run.open_call is None
    assert run.failure_message == (
        f"The database server restarted while the run was in flight, at {started} UTC: "
        "its worker could not record the rest of the run."
    )
    assert LedgerEntry.objects.get(run_id=run.pk).estimated  # its open call charged all the same
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert f"database server restarted while the run was in flight, at {started} UTC" in page
    assert "or lost the database" in page


def test_a_providers_error_leaves_nothing_charged(owner):
    body = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
    provider = Provider(httpx.Response(500, json=body))
    run = execute(owner, make_wire_agent(OPENAI), provider)

    assert run.status == Run.Status.FAILED and run.failure_reason == "provider_error"
    assert run.open_call is None and run.cost == Decimal(0)
    assert not LedgerEntry.objects.filter(run_id=run.pk).exists()
