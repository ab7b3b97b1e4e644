"""A host that stops inside a transaction on a run's row (paused, cut off, swapping) holds that row,
and the owner's spend rows its end moves, for as long as its connection lives. Neither the reaper
nor the owner's other runs wait on it for longer than runs.services.HELD_ROW_SECONDS."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs import services
from runs.failures import Outcome
from runs.models import Run
from tests.factories import make_agent, running_run, start_interactive_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held_briefly(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(services, "HELD_ROW_SECONDS", 1)
    return 1


def _silent(*runs: Run) -> None:
    """Their worker's last heartbeat long past the lease."""
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )


def _hold(run: Run, *, until: threading.Event, held: threading.Event) -> threading.Thread:
    """Another connection takes the run's row and keeps it (a transaction whose host stopped)."""

    def hold() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().filter(pk=run.pk).get()
                held.set()
                until.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    return thread


def test_the_reaper_gives_up_a_held_run_for_its_next_pass_and_reaps_the_others_meanwhile(owner, held_briefly):
    agent = make_agent()
    stuck, other = running_run(owner, agent), running_run(owner, agent)
    _silent(stuck, other)
    release, held = threading.Event(), threading.Event()
    holder = _hold(stuck, until=release, held=held)
    try:
        began = time.monotonic()
        failed = services.fail_lost_runs()
        assert time.monotonic() - began < held_briefly + 3  # not for as long as the holder lives
        assert failed == [other.pk]
        assert Run.objects.get(pk=stuck.pk).status == Run.Status.RUNNING
    finally:
        release.set()
        holder.join(10)
    # Once the row is free, the next pass reaps it, once.
    assert services.fail_lost_runs() == [stuck.pk]
    assert services.fail_lost_runs() == []
    assert set(Run.objects.values_list("failure_reason", flat=True)) == {"worker_lost"}


def test_a_run_end_whose_host_stops_inside_it_is_ended_by_the_server_and_the_reaper_then_reaps_the_run(
    owner, held_briefly
):
    run = running_run(owner, make_agent())
    ended_inside, stopped = threading.Event(), threading.Event()
    problems: list[BaseException] = []

    def end_then_stop() -> None:
        try:
            with transaction.atomic():
                services.finish_run(
                    run, Outcome(status=Run.Status.COMPLETED, answer="Done."), attempt=run.attempt
                )
                ended_inside.set()
                time.sleep(held_briefly + 2)  # stopped before its commit, past the idle bound
        except BaseException as exc:  # the server ended the session: the commit cannot happen
            problems.append(exc)
        finally:
            stopped.set()
            connection.close()

    thread = threading.Thread(target=end_then_stop)
    thread.start()
    assert ended_inside.wait(10)
    began = time.monotonic()
    # The reaper waits on the row only until the server ends that idle transaction.
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert time.monotonic() - began < held_briefly + 1.5
    assert services.fail_lost_runs() == [run.pk]
    thread.join(10)
    assert problems, "the stopped transaction's commit must fail: its session was ended"
    run.refresh_from_db()
    assert (run.status, run.failure_reason, run.answer) == (Run.Status.FAILED, "worker_lost", "")


def test_a_run_ended_inside_another_callers_transaction_leaves_that_transactions_idle_bound_alone(owner):
    """The tick refuses runs inside its own transaction, which may build a large batch in Python
    between two statements: only an attempt's own end (the loop's, the reaper's) bounds idleness."""
    agent = make_agent()
    queued = start_interactive_run(owner.pk, agent, "Refused")

    def bound_inside(run: Run, attempt: object) -> str:
        with transaction.atomic():
            services.finish_run(run, Outcome(status=Run.Status.CANCELLED), attempt=attempt)  # type: ignore[arg-type]
            with connection.cursor() as cursor:
                cursor.execute("SHOW idle_in_transaction_session_timeout")
                return str(cursor.fetchone()[0])

    assert bound_inside(queued, None) == "0"
    running = running_run(owner, agent)
    assert bound_inside(running, running.attempt) == f"{services.HELD_ROW_SECONDS}s"
