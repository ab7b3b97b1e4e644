"""Three hosts, one PostgreSQL, a burst of runs due together, and a fault in the middle of it: each
test reads the database afterwards and asserts the same invariants (tests/hosts/conftest.py):
every occurrence run exactly once or failed with its reason, no run charged twice, every
reservation released, the spend rollups equal to the ledger, no run left running or queued."""

from __future__ import annotations

import signal
import time

import pytest

from runs import inflight
from runs.models import Run
from schedules import waker
from tests.factories import make_agent, start_interactive_run
from tests.hosts.conftest import (
    LEASE_SECONDS,
    assert_invariants,
    by_host,
    due_now,
    seed,
    settle,
    started,
)
from tests.scheduler.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _in_flight_on(host: str) -> list[Run]:
    return list(Run.objects.filter(status=Run.Status.RUNNING, worker__startswith=f"{host}:"))


def test_a_host_killed_mid_burst_fails_its_runs_worker_lost_once_and_the_others_run_the_rest(hosts, owners):
    schedules = seed(owners, 300)
    due_now(schedules)
    wait_for(started(60), timeout=60, interval=0.1)
    dead = hosts[0]
    in_flight = {run.pk for run in _in_flight_on(dead.name)}
    dead.kill()
    assert in_flight, hosts.logs()

    def shown_lost() -> list[str]:
        """the dead host's worker to show as lost"""
        return [worker.host for worker in inflight.in_flight().workers if worker.lost]

    # What an admin's dashboard and the API read: that host's worker lost, within the lease, and
    # only that one (the live hosts heartbeat).
    assert wait_for(shown_lost, timeout=LEASE_SECONDS + 5) == [dead.name]
    settle()
    outcomes = assert_invariants(schedules, owners)
    lost = set(Run.objects.filter(failure_reason="worker_lost").values_list("pk", flat=True))
    # What it held when it died failed worker_lost (nothing else did); the rest ran elsewhere.
    assert in_flight <= lost, hosts.logs()
    assert outcomes == {"completed": 300 - len(lost), "failed worker_lost": len(lost)}, hosts.logs()
    assert len(lost) <= 20  # at most its slots
    hosts_of = by_host()
    assert hosts_of["host-b"] > 30 and hosts_of["host-c"] > 40  # each took more turns than one

    # A run whose task died with the host (no task left, no notification): a live host claims it
    # within its waker's fallback interval, not at the broker's retry.
    run = start_interactive_run(owners[0].pk, make_agent(model="sim-research"), "Still there?")
    queued = time.monotonic()
    wait_for(
        lambda: Run.objects.filter(pk=run.pk, started_at__isnull=False).exists(), timeout=10, interval=0.1
    )
    assert time.monotonic() - queued < waker.FALLBACK_SECONDS + 1.5
    run.refresh_from_db()
    assert not run.worker.startswith(f"{dead.name}:")


def test_a_host_paused_past_its_lease_and_resumed_writes_nothing_late(hosts, owners):
    schedules = seed(owners, 120)
    due_now(schedules)
    wait_for(started(30), timeout=60, interval=0.1)
    paused = hosts[1]
    paused.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    held = {run.pk for run in _in_flight_on(paused.name)}
    assert held, hosts.logs()

    def others_done() -> bool:
        """every run but the paused host's to end"""
        return (
            not Run.objects.filter(status=Run.Status.QUEUED).exists()
            and not (
                Run.objects.filter(status=Run.Status.RUNNING).exclude(worker__startswith=f"{paused.name}:")
            ).exists()
        )

    wait_for(others_done, timeout=90)
    time.sleep(max(0.0, LEASE_SECONDS + 1 - (time.monotonic() - stopped_at)))
    settle()  # its runs reaped while it sleeps
    paused.signal(signal.SIGCONT)
    time.sleep(4)  # it wakes, its calls answer, it tries to write them

    settle()
    outcomes = assert_invariants(schedules, owners)
    lost = set(Run.objects.filter(failure_reason="worker_lost").values_list("pk", flat=True))
    assert lost == held, hosts.logs()
    assert outcomes == {"completed": 120 - len(held), "failed worker_lost": len(held)}
    # Its late answers were refused by fencing: each of its runs is charged once, the bound the
    # reaper charged for the call on the wire, not the answer that came after.
    for run in Run.objects.filter(pk__in=held):
        assert run.answer == "" and run.cost > 0, run
