"""A host stopped as a deploy stops it (SIGTERM to its cluster) finishes the runs it holds before its
processes end, however they were claimed: by a task's turn, or by the waker's turn on a thread of
its own; and it claims no new run meanwhile, which another host then claims."""

from __future__ import annotations

import signal
import time

import pytest
from django_q.models import Schedule as QueueSchedule

from runs.models import Run
from tests.factories import make_agent, start_interactive_run
from tests.hosts.conftest import Hosts, make_host
from tests.scheduler.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_stopped_host_finishes_the_runs_its_waker_claimed_before_it_ends(owners, tmp_path):
    owner = owners[0]
    QueueSchedule.objects.all().delete()
    host = make_host("host-a", tmp_path, Q_POLL_SECONDS="0.5")  # its pusher stops within that
    try:
        host.start()
        Hosts([host]).wait_ready()
        agent = make_agent(model="sim-slow")
        # No task and no notification: only the waker's fallback turn claims these.
        runs = [start_interactive_run(owner.pk, agent, "Take your time: delay=7") for _ in range(5)]

        def all_running() -> bool:
            """the waker to claim every run"""
            return Run.objects.filter(status=Run.Status.RUNNING).count() == len(runs)

        wait_for(all_running, timeout=20, interval=0.1)
        stopping = time.monotonic()
        host.signal_main(signal.SIGTERM)
        time.sleep(2.5)  # its pusher stopped, its worker left its task loop and waits for its runs
        waiting = start_interactive_run(owner.pk, agent, "Take your time: delay=1")
        host.wait(timeout=30)
        took = time.monotonic() - stopping
    finally:
        host.end()

    statuses = set(Run.objects.filter(pk__in=[run.pk for run in runs]).values_list("status", flat=True))
    assert statuses == {Run.Status.COMPLETED}, host.log()
    assert 1 < took < 15
    waiting.refresh_from_db()
    # Not claimed while it stopped: another host's to claim.
    assert waiting.status == Run.Status.QUEUED, (waiting.worker, host.log())
