"""Three hosts, one PostgreSQL, a burst of runs due together, and a fault in the middle of it: each
test reads the database afterwards and asserts the same invariants (tests/hosts/conftest.py):
every occurrence run exactly once or failed with its reason, no run charged twice, every
reservation released, the spend rollups equal to the ledger, no run left running or queued."""

from __future__ import annotations

import signal
import time

import pytest
from django.conf import settings

from accounting.models import LedgerEntry
from runs import inflight
from runs.models import Run
from schedules import tasks
from tests.factories import make_agent, start_interactive_run
from tests.hosts.conftest import (
    LEASE_SECONDS,
    assert_invariants,
    by_host,
    due_now,
    fired,
    seed,
    settle,
    started,
)
from tests.scheduler.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _in_flight_on(host: str) -> list[Run]:
    return list(Run.objects.filter(status=Run.Status.RUNNING, worker__startswith=f"{host}:"))


def _calls_on_the_wire(held: set[int]) -> set[int]:
    """Of the runs a host held when it went away, those that had sent their call (its open call
    recorded); the others were claimed and still starting."""
    return set(Run.objects.filter(pk__in=held, open_call__isnull=False).values_list("pk", flat=True))


def _landed(host: str) -> tuple[set[int], set[int]]:
    """What a stopped host holds, once the statements it sent before it stopped have landed: a
    claim or an open call already on its way to the server commits a moment after the signal, so
    the runs it holds and their calls on the wire are read until two reads, 0.3 s apart, agree."""

    def read() -> tuple[set[int], set[int]]:
        held = {run.pk for run in _in_flight_on(host)}
        return held, _calls_on_the_wire(held)

    last, now = None, read()
    while now != last:
        time.sleep(0.3)
        last, now = now, read()
    return now


def _charged_once_for_the_call_on_the_wire(held: set[int], on_the_wire: set[int]) -> None:
    """Each run with a call on the wire is charged once, the bound of that call (the reaper's
    estimate), not the answer that came after; a run that had sent nothing is charged nothing."""
    for run in Run.objects.filter(pk__in=held):
        entries = list(LedgerEntry.objects.filter(run_id=run.pk))
        assert run.answer == "", run
        if run.pk in on_the_wire:
            (entry,) = entries
            assert entry.estimated and "worker was lost" in entry.prices["basis"], entry.prices
            assert run.cost == entry.cost > 0, run
        else:
            assert entries == [] and run.cost == 0, run


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
    assert time.monotonic() - queued < settings.WAKER_FALLBACK_SECONDS + 1.5
    run.refresh_from_db()
    assert not run.worker.startswith(f"{dead.name}:")


def test_a_host_paused_past_its_lease_and_resumed_writes_nothing_late(hosts, owners):
    schedules = seed(owners, 120)
    due_now(schedules)
    wait_for(started(30), timeout=60, interval=0.1)
    paused = hosts[1]
    # Paused with a call on the wire (its calls outlast the pause's read by far).
    wait_for(
        lambda: _calls_on_the_wire({run.pk for run in _in_flight_on(paused.name)}), timeout=30, interval=0.05
    )
    paused.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    held, on_the_wire = _landed(paused.name)
    assert held, hosts.logs()
    # A run claimed but not yet at its call (its loop starting) sent nothing: nothing to charge.
    assert on_the_wire, hosts.logs()

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
    _charged_once_for_the_call_on_the_wire(held, on_the_wire)


def test_a_host_cut_off_past_its_lease_then_healed_has_its_late_writes_refused(hosts, owners):
    # Every call outlasts the partition: the cut-off host's runs are still on the wire when it heals.
    schedules = seed(owners, 60, delay=LEASE_SECONDS + 8)
    hosts[1].proxy.slow(0.02)  # and one host's link to the database is slow all along
    due_now(schedules)
    wait_for(started(60), timeout=60, interval=0.1)
    cut = hosts[2]
    wait_for(lambda: _calls_on_the_wire({run.pk for run in _in_flight_on(cut.name)}), timeout=30)
    cut.proxy.cut()
    cut_at = time.monotonic()
    connections_before = cut.proxy.accepted
    time.sleep(0.5)  # a write under way as the link went down has failed by now
    held = {run.pk for run in _in_flight_on(cut.name)}
    on_the_wire = _calls_on_the_wire(held)
    assert on_the_wire, hosts.logs()

    def reaped() -> bool:
        """the cut-off host's runs to be reaped by a live host's reaper"""
        tasks.reap()
        return not Run.objects.filter(pk__in=held, status=Run.Status.RUNNING).exists()

    wait_for(reaped, timeout=LEASE_SECONDS + 10, interval=0.5)
    assert time.monotonic() - cut_at >= LEASE_SECONDS - 1
    cut.proxy.resume()  # healed while its calls are still on the wire

    settle()
    # It came back and wrote (or tried to): new connections through its proxy after the heal.
    wait_for(lambda: cut.proxy.accepted > connections_before, timeout=20)
    time.sleep(2)  # its last answers arrive and are refused
    outcomes = assert_invariants(schedules, owners)
    assert outcomes == {"completed": 60 - len(held), "failed worker_lost": len(held)}, hosts.logs()
    # Charged once: the bound the reaper charged for the call on the wire, not the late answer.
    _charged_once_for_the_call_on_the_wire(held, on_the_wire)


def test_every_connection_cut_at_once_mid_burst_loses_and_doubles_nothing_and_the_tick_goes_on(hosts, owners):
    """The database restarted, as every host sees it: all their connections drop at once and none
    opens for a few seconds (less than the lease)."""
    schedules = seed(owners, 150)
    first, later = schedules[:120], schedules[120:]
    due_now(first)
    wait_for(started(40), timeout=60, interval=0.1)
    for host in hosts:
        host.proxy.cut()
    time.sleep(3)
    for host in hosts:
        host.proxy.resume()
    settle()
    outcomes = assert_invariants(first, owners)
    assert sum(outcomes.values()) == 120
    assert set(outcomes) <= {"completed", "failed worker_lost"}, (outcomes, hosts.logs())
    assert outcomes.get("completed", 0) >= 40, (outcomes, hosts.logs())

    due_now(later)  # the hosts tick again once the database is back
    wait_for(fired(later), timeout=30)
    settle()
    assert assert_invariants(schedules, owners)["completed"] == outcomes.get("completed", 0) + 30


def test_a_rolling_restart_of_the_three_hosts_with_runs_in_flight_loses_no_run(hosts, owners):
    schedules = seed(owners, 150, delay=3)
    due_now(schedules)
    wait_for(started(60), timeout=60, interval=0.1)
    for host in hosts:
        had = len(_in_flight_on(host.name))
        stopping = time.monotonic()
        host.stop(timeout=30)  # SIGTERM: it ends the runs it holds, and claims no new one
        # Its stop waited for its runs in flight, not for the whole queue behind them.
        assert time.monotonic() - stopping < 15, (had, hosts.logs())
        assert not _in_flight_on(host.name), (had, hosts.logs())  # it ended them before it stopped
        host.start()
        hosts.wait_ready()
    settle()
    outcomes = assert_invariants(schedules, owners)
    assert outcomes == {"completed": 150}, hosts.logs()
