"""A host that stops inside its claim (paused, cut off) holds the queued run's row lock, which every
other claimer skips: PostgreSQL ends that transaction after the claim's timeout, and a live host
claims the run within seconds, once (runs.inflight.CLAIM_TIMEOUT_SECONDS)."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection

from runs import inflight
from runs.models import Run
from runs.signals import run_claimed
from tests.factories import make_agent, start_interactive_run
from tests.scheduler.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_host_stopped_inside_its_claim_loses_the_run_to_a_live_host_within_the_claim_timeout(
    owner, monkeypatch
):
    monkeypatch.setattr(inflight, "CLAIM_TIMEOUT_SECONDS", 1)
    run = start_interactive_run(owner.pk, make_agent(model="sim-research"), "Hello")
    inside, woken = threading.Event(), threading.Event()

    def stop_inside_the_claim(sender, run, attempt, **kwargs):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "stopped-host":
            inside.set()
            woken.wait(15)  # SIGSTOP: the transaction stays open, its row lock held

    run_claimed.connect(stop_inside_the_claim)
    errors: list[Exception] = []

    def stopped_host() -> None:
        try:
            inflight.claim_next()
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=stopped_host, name="stopped-host")
    thread.start()
    try:
        assert inside.wait(10)
        assert inflight.claim_next() is None  # its lock is skipped, as claimers do
        claimed = wait_for(inflight.claim_next, timeout=5, interval=0.2)
    finally:
        woken.set()
        thread.join(10)
        run_claimed.disconnect(stop_inside_the_claim)

    assert claimed.pk == run.pk
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.attempt == claimed.attempt
    # The stopped host, woken, finds its transaction ended by the server: its claim never committed.
    assert len(errors) == 1 and isinstance(errors[0], DatabaseError), errors
    assert "idle-in-transaction timeout" in str(errors[0])
