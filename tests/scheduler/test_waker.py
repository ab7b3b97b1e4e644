"""A run due now starts now (schedules.waker): each worker process of a real django-q2 cluster ticks
at a schedule's slot, not at the next minute of django-q2's scheduler, and takes a turn when runs
are queued (NOTIFY) instead of waiting for the broker's poll; a notification lost with its connection
costs at most the fallback interval, never a run."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule as QueueSchedule

from runs import conversations
from runs.models import Run
from runs.tasks import enqueue_runs
from schedules import waker
from tests.factories import make_agent, make_schedule, start_interactive_run
from tests.scheduler.conftest import read_log, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _started() -> Run | None:
    """the run to start"""
    return Run.objects.filter(started_at__isnull=False).first()


def _ready(cluster) -> bool:  # type: ignore[no-untyped-def]
    """the cluster's workers to listen"""
    with connection.cursor() as cursor:
        cursor.execute(  # on this test's database: other test processes' clusters share the server
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            [waker.APPLICATION_NAME],
        )
        return bool(cursor.fetchone()[0] >= 1)


def test_a_one_time_schedule_starts_at_its_slot_not_at_the_next_minute(owner, spawn):
    QueueSchedule.objects.all().delete()  # no minute tick: only the workers' wakers
    cluster = spawn("qcluster")
    wait_for(lambda: _ready(cluster), timeout=30)
    slot = timezone.now() + timedelta(seconds=3)
    make_schedule(owner, make_agent(model="sim-research"), run_at=slot)  # written after the cluster started

    run = wait_for(_started, timeout=30, interval=0.05)
    assert (run.started_at - slot).total_seconds() < 1.0, read_log(cluster)
    wait_for(lambda: Run.objects.filter(status="completed").exists(), timeout=30)


def test_a_message_is_claimed_when_it_is_queued_not_at_the_brokers_poll(owner, spawn):
    # A broker and a fallback turn that would both make it wait 30 s: only the notification
    # can start it within seconds.
    cluster = spawn("qcluster", env={"Q_POLL_SECONDS": "30", "WAKER_FALLBACK_SECONDS": "30"})
    wait_for(lambda: _ready(cluster), timeout=30)
    agent = make_agent(model="sim-research")
    sent = time.monotonic()
    conversations.start_conversation(owner.pk, agent, "What time is it?", enqueue=enqueue_runs)

    wait_for(_started, timeout=20, interval=0.02)
    assert time.monotonic() - sent < 5, read_log(cluster)


def test_a_notification_lost_with_its_connection_costs_at_most_the_fallback_interval(owner, spawn):
    cluster = spawn("qcluster", env={"Q_POLL_SECONDS": "30"})
    wait_for(lambda: _ready(cluster), timeout=30)
    with connection.cursor() as cursor:  # every waker's connection dropped, as a network blip would
        cursor.execute(  # this test's database only: other test processes' clusters share the server
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            [waker.APPLICATION_NAME],
        )
    agent = make_agent(model="sim-research")
    sent = time.monotonic()
    conversations.start_conversation(owner.pk, agent, "What time is it?", enqueue=enqueue_runs)

    wait_for(_started, timeout=20, interval=0.05)
    took = time.monotonic() - sent
    assert took < waker.RECONNECT_SECONDS + settings.WAKER_FALLBACK_SECONDS + 1.5, read_log(cluster)
    wait_for(lambda: Run.objects.filter(status="completed").exists(), timeout=30)


def test_a_queued_run_nobody_notified_is_claimed_within_the_fallback_however_near_the_next_slot(owner, spawn):
    """A run whose task died with its host: no task left, no notification coming. The next slot is
    kept less than the fallback interval away all along, moved without a notification (as a slot
    read just before another host's tick moved it): the fallback turn is still taken."""
    QueueSchedule.objects.all().delete()  # no minute tick: only the workers' wakers
    agent = make_agent(model="sim-research")
    schedule = make_schedule(owner, agent, run_at=timezone.now() + timedelta(hours=1))
    cluster = spawn("qcluster", env={"Q_POLL_SECONDS": "30"})
    wait_for(lambda: _ready(cluster), timeout=30)

    def keep_the_slot_near() -> None:
        with connection.cursor() as cursor:  # replica role: the slot's trigger does not notify
            cursor.execute("BEGIN; SET LOCAL session_replication_role = replica")
            cursor.execute(
                "UPDATE schedules_schedule SET next_occurrence_at = now() + interval '1.5 seconds' "
                "WHERE id = %s",
                [schedule.pk],
            )
            cursor.execute("COMMIT")

    for _ in range(10):  # every waker reads the near slot, and waits for it
        keep_the_slot_near()
        time.sleep(0.3)
    run = start_interactive_run(owner.pk, agent, "What time is it?")  # no task, no notification
    queued = time.monotonic()
    while time.monotonic() - queued < settings.WAKER_FALLBACK_SECONDS + 3:
        keep_the_slot_near()
        if Run.objects.filter(pk=run.pk, started_at__isnull=False).exists():
            break
        time.sleep(0.3)
    run.refresh_from_db()
    assert not Run.objects.exclude(pk=run.pk).exists()  # the slot never came
    assert run.started_at is not None, read_log(cluster)
    assert time.monotonic() - queued < settings.WAKER_FALLBACK_SECONDS + 1.5, read_log(cluster)
