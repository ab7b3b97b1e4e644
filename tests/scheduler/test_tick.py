"""The tick: grace window, missed and skipped slots, no catch-up storm, DST, poison schedules,
and the enqueue written in the same transaction."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone
from django_q.models import OrmQ

from accounting.models import Reservation
from runs.models import Agent, Run
from schedules import execution
from schedules.models import Occurrence, Schedule, ScheduleRevision
from schedules.tasks import enqueue_occurrences
from tests.factories import make_agent, make_schedule

pytestmark = pytest.mark.django_db

RIGA_0900_UTC = datetime(2026, 9, 2, 6, 0, tzinfo=UTC)  # 09:00 in Riga (EEST)


def tick(at: datetime) -> tuple[execution.TickReport, list[int]]:
    enqueued: list[int] = []
    report = execution.materialize_due(enqueue=enqueued.extend, now=at)
    return report, enqueued


def briefing(owner, agent, **kwargs):
    return make_schedule(owner, agent, now=RIGA_0900_UTC - timedelta(days=1), **kwargs)


def test_a_due_slot_becomes_a_pending_occurrence_with_a_queued_admitted_run(owner, agent):
    schedule = briefing(owner, agent)
    report, enqueued = tick(RIGA_0900_UTC + timedelta(seconds=20))

    occurrence = Occurrence.objects.get()
    assert enqueued == [occurrence.pk] == report.enqueued
    assert (occurrence.scheduled_for, occurrence.outcome, occurrence.revision.number) == (
        RIGA_0900_UTC,
        "pending",
        1,
    )
    run = occurrence.run
    assert run.status == "queued" and run.kind == "interactive"
    assert run.limits == schedule.revision.limits
    # No call on the wire: SQL NULL, as the ORM writes it, not the JSON value null (which reads
    # as an open call to `open_call__isnull`).
    assert Run.objects.filter(pk=run.pk, open_call__isnull=True).exists()
    assert run.conversation.title == "Morning briefing — 2 Sep 2026"
    assert run.conversation.metadata == {
        "schedule_id": schedule.pk,
        "occurrence_id": occurrence.pk,
        "scheduled_for": RIGA_0900_UTC.isoformat(),
        "revision": 1,
    }
    assert Reservation.objects.get(run_id=run.pk).amount == Decimal("5.00")
    schedule.refresh_from_db()
    assert schedule.next_occurrence_at == RIGA_0900_UTC + timedelta(days=1)


def test_a_second_tick_at_the_same_moment_does_nothing(owner, agent):
    briefing(owner, agent)
    tick(RIGA_0900_UTC + timedelta(seconds=20))
    _report, enqueued = tick(RIGA_0900_UTC + timedelta(seconds=20))
    assert enqueued == [] and Occurrence.objects.count() == 1 and Run.objects.count() == 1


def test_a_slot_found_after_its_grace_window_is_missed_and_not_run(owner, agent, settings):
    settings.SCHEDULE_GRACE_SECONDS = 15 * 60
    schedule = briefing(owner, agent)
    report, enqueued = tick(RIGA_0900_UTC + timedelta(minutes=16))
    assert enqueued == [] and report.missed == 1
    occurrence = Occurrence.objects.get()
    assert occurrence.outcome == "missed" and occurrence.run is None
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 0 and schedule.status == "active"
    assert schedule.next_occurrence_at == RIGA_0900_UTC + timedelta(days=1)


def test_within_the_grace_window_a_late_slot_still_runs(owner, agent):
    briefing(owner, agent)
    _, enqueued = tick(RIGA_0900_UTC + timedelta(minutes=14))
    assert len(enqueued) == 1


def test_three_days_of_downtime_on_a_per_minute_schedule_produce_one_run_not_thousands(owner, agent):
    start = datetime(2026, 9, 1, 0, 0, tzinfo=UTC)
    schedule = make_schedule(owner, agent, cron="* * * * *", tz="UTC", now=start - timedelta(seconds=30))
    back = start + timedelta(days=3, seconds=10)

    report, enqueued = tick(back)

    assert len(enqueued) == 1
    assert Run.objects.count() == 1
    assert report.missed == 3 * 24 * 60  # every slot but the newest
    assert Occurrence.objects.filter(outcome="missed").count() == execution.MAX_MISSED_RECORDED
    newest = Occurrence.objects.get(outcome="pending")
    assert newest.scheduled_for == start + timedelta(days=3)
    schedule.refresh_from_db()
    assert schedule.next_occurrence_at == start + timedelta(days=3, minutes=1)


def test_a_slot_due_while_the_previous_run_is_in_flight_is_skipped_and_not_counted(owner, agent):
    schedule = make_schedule(
        owner, agent, cron="*/5 * * * *", tz="UTC", now=RIGA_0900_UTC - timedelta(minutes=1)
    )
    tick(RIGA_0900_UTC + timedelta(seconds=5))
    report, enqueued = tick(RIGA_0900_UTC + timedelta(minutes=5, seconds=5))
    assert enqueued == [] and report.skipped == 1
    assert list(Occurrence.objects.order_by("scheduled_for").values_list("outcome", flat=True)) == [
        "pending",
        "skipped",
    ]
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 0


def test_a_one_time_schedule_missed_after_downtime_completes_without_running(owner, agent):
    when = timezone.now() + timedelta(minutes=1)
    schedule = make_schedule(owner, agent, run_at=when)
    report, enqueued = tick(when + timedelta(hours=2))
    assert enqueued == [] and report.missed == 1
    schedule.refresh_from_db()
    assert schedule.status == "completed" and schedule.next_occurrence_at is None
    (event,) = schedule.pause_events.all()
    assert (event.action, event.actor, event.detail) == ("complete", None, "its only slot was missed")


@pytest.mark.parametrize(
    ("zone", "days"),
    [
        ("Europe/Riga", (datetime(2026, 3, 27), 5)),
        ("Europe/Riga", (datetime(2026, 10, 23), 5)),
        ("America/New_York", (datetime(2026, 3, 6), 5)),
        ("America/New_York", (datetime(2026, 10, 30), 5)),
    ],
)
def test_dst_days_produce_exactly_one_occurrence_per_local_day(owner, agent, zone, days):
    import zoneinfo

    from runs.failures import Outcome
    from runs.services import finish_run

    first, count = days
    start = first.replace(tzinfo=zoneinfo.ZoneInfo(zone)).astimezone(UTC)  # local midnight
    end = (first + timedelta(days=count)).replace(tzinfo=zoneinfo.ZoneInfo(zone)).astimezone(UTC)
    make_schedule(owner, agent, cron="30 2 * * *", tz=zone, now=start)
    at = start
    while at < end:
        # Every ten minutes through the night (the slot, and the hour the clocks change), hourly
        # through the day, where nothing is due: a third of the ticks, the same nights.
        night = at.astimezone(zoneinfo.ZoneInfo(zone)).hour < 5
        at += timedelta(minutes=10 if night else 60)
        _, _enqueued = tick(at)
        for run in Run.objects.filter(status="queued"):  # end each run so the next is not skipped
            finish_run(run, Outcome(status="completed"))
    local = [
        o.scheduled_for.astimezone(zoneinfo.ZoneInfo(zone))
        for o in Occurrence.objects.order_by("scheduled_for")
    ]
    days = [moment.date() for moment in local]
    assert len(days) == len(set(days)) == count  # one per local day, none twice
    assert [(b - a).days for a, b in itertools.pairwise(days)] == [1] * (len(days) - 1)  # none skipped
    assert all((moment.hour, moment.minute) in ((2, 30), (3, 0)) for moment in local)  # 03:00 only in the gap
    assert Occurrence.objects.exclude(outcome="completed").count() == 0


def test_poison_schedules_are_paused_with_a_sanitized_reason_and_the_others_still_run(owner, agent):
    good = briefing(owner, agent, title="Good")
    retired_agent = make_agent("retired-one")
    retired = briefing(owner, retired_agent, title="Retired agent")
    Agent.objects.filter(pk=retired_agent.pk).update(is_active=False)
    bad_zone = briefing(owner, agent, title="Old data, unknown zone")
    bad_limits = briefing(owner, agent, title="Limits that no longer validate")
    never = briefing(owner, agent, title="Never fires again")
    # Old rows as a past version might have left them (revisions are append-only in code).
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE schedules_schedulerevision SET timezone = 'Mars/Olympus' WHERE schedule_id = %s",
            [bad_zone.pk],
        )
        cursor.execute(
            "UPDATE schedules_schedulerevision "
            "SET limits = jsonb_set(limits, '{synthesis_reserve_cost}', '\"9.00\"') "
            "WHERE schedule_id = %s",
            [bad_limits.pk],
        )
        cursor.execute(
            "UPDATE schedules_schedulerevision SET cron = '0 9 30 2 *' WHERE schedule_id = %s", [never.pk]
        )

    report, enqueued = tick(RIGA_0900_UTC + timedelta(seconds=20))

    assert [Occurrence.objects.get(pk=pk).schedule_id for pk in enqueued] == [good.pk]
    assert sorted(report.paused) == sorted([retired.pk, bad_zone.pk, bad_limits.pk, never.pk])
    details = {
        s.title: s.pause.detail for s in Schedule.objects.filter(status="paused").select_related("pause")
    }
    assert details == {
        "Retired agent": "its agent 'retired-one' is retired",
        "Old data, unknown zone": "'Mars/Olympus' is not an IANA time zone (for example Europe/Riga)",
        "Limits that no longer validate": (
            "its pinned limits no longer validate: "
            "synthesis_reserve_cost must be below max_cost (9.00 ≥ 5.00)"
        ),
        "Never fires again": "cron '0 9 30 2 *' never fires again",
    }
    assert all(s.pause.reason == "invalid_definition" for s in Schedule.objects.filter(status="paused"))
    assert ScheduleRevision.objects.filter(schedule=bad_zone).get().timezone == "Mars/Olympus"


def test_an_unexpected_error_in_one_schedule_is_contained(owner, agent, monkeypatch):
    good = briefing(owner, agent, title="Good")
    broken = briefing(owner, agent, title="Broken")
    original = execution._plan

    def flaky_plan(schedule, **kwargs):
        if schedule.pk == broken.pk:
            raise ZeroDivisionError("boom")
        return original(schedule, **kwargs)

    monkeypatch.setattr(execution, "_plan", flaky_plan)
    _report, enqueued = tick(RIGA_0900_UTC + timedelta(seconds=20))
    assert len(enqueued) == 1 and Occurrence.objects.get().schedule == good
    broken.refresh_from_db()
    assert broken.status == "paused" and broken.pause.detail == "internal error (ZeroDivisionError)"


def test_the_task_rows_are_written_in_the_ticks_own_transaction(owner, agent):
    briefing(owner, agent)
    seen: list[int] = []

    def tick_then_fail() -> None:
        with transaction.atomic():
            execution.materialize_due(enqueue=enqueue_occurrences, now=RIGA_0900_UTC + timedelta(seconds=5))
            seen.append(OrmQ.objects.count())  # visible inside the transaction that wrote the occurrence
            raise RuntimeError("the tick's transaction rolls back")

    with pytest.raises(RuntimeError):
        tick_then_fail()
    assert seen == [1]
    assert OrmQ.objects.count() == 0 and Occurrence.objects.count() == 0 and Run.objects.count() == 0

    execution.materialize_due(enqueue=enqueue_occurrences, now=RIGA_0900_UTC + timedelta(seconds=5))
    task = OrmQ.objects.get()
    assert task.task["func"] == "schedules.tasks.run_occurrence"
    assert task.task["args"] == (Occurrence.objects.get().pk,)


def test_with_another_broker_tasks_are_sent_only_on_commit(
    owner, agent, settings, django_capture_on_commit_callbacks
):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "orm": None}
    briefing(owner, agent)
    with django_capture_on_commit_callbacks() as callbacks:
        execution.materialize_due(enqueue=enqueue_occurrences, now=RIGA_0900_UTC + timedelta(seconds=5))
        assert OrmQ.objects.count() == 0
    assert len(callbacks) == 1


def test_a_refused_admission_is_a_counted_failure(owner, agent):
    from accounting import ledger

    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = Decimal("4.00")
    budget.save()
    schedule = briefing(owner, agent)
    report, enqueued = tick(RIGA_0900_UTC + timedelta(seconds=20))
    assert enqueued == [] and report.refused == 1
    run = Occurrence.objects.get().run
    assert (run.status, run.failure_reason, run.error_class, run.failure_dimension) == (
        "failed",
        "admission_denied",
        "AdmissionDenied",
        "daily",
    )
    assert "daily ceiling of USD 4.00" in run.failure_message
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1
    assert not Reservation.objects.exists()


def test_a_title_at_its_longest_still_fits_the_conversation(owner, agent):
    schedule = briefing(owner, agent, title="B" * 200)
    _, enqueued = tick(RIGA_0900_UTC + timedelta(seconds=20))
    assert len(enqueued) == 1
    title = Occurrence.objects.get().run.conversation.title
    assert len(title) <= 200 and title.endswith(" — 2 Sep 2026")
    schedule.refresh_from_db()
    assert schedule.status == "active"
