"""Pause and resume: audit rows, the kept count, and exactly one transition under races."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from schedules import services
from schedules.models import PauseEvent, Schedule
from tests.concurrency import race
from tests.factories import fail, finish, make_schedule, materialize


@pytest.mark.django_db
def test_owner_pause_and_resume_write_audit_rows_and_keep_the_count(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    services.pause_schedule(schedule, by=owner)
    schedule.refresh_from_db()
    assert schedule.status == "paused"
    assert schedule.pause.reason == "owner"
    assert schedule.pause.actor == owner

    services.resume_schedule(schedule, by=owner)
    schedule.refresh_from_db()
    assert schedule.status == "active"
    assert schedule.consecutive_failures == 1
    assert schedule.pause is None
    events = list(PauseEvent.objects.filter(schedule=schedule).order_by("created_at", "id"))
    assert [(e.action, e.reason, e.failures_at_event) for e in events] == [
        ("pause", "owner", 1),
        ("resume", "", 1),
    ]


@pytest.mark.django_db
def test_staff_pausing_someone_elses_schedule_is_an_admin_pause(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    services.pause_schedule(schedule, by=admin_user)
    schedule.refresh_from_db()
    assert schedule.pause.reason == "admin"


@pytest.mark.django_db
def test_pause_only_from_active_and_resume_only_from_paused(owner, agent):
    schedule = make_schedule(owner, agent)
    with pytest.raises(services.NotPaused):
        services.resume_schedule(schedule, by=owner)
    services.pause_schedule(schedule, by=owner)
    with pytest.raises(services.NotActive):
        services.pause_schedule(schedule, by=owner)
    assert PauseEvent.objects.count() == 1


@pytest.mark.django_db
def test_resume_computes_the_next_slot_after_now_without_backfill(owner, agent):
    with time_machine.travel(datetime(2026, 9, 1, 5, 0, tzinfo=UTC), tick=False):
        schedule = make_schedule(owner, agent, cron="0 9 * * *", tz="Europe/Riga")
        services.pause_schedule(schedule, by=owner)
    with time_machine.travel(datetime(2026, 9, 5, 7, 30, tzinfo=UTC), tick=False):
        services.resume_schedule(schedule, by=owner)
    schedule.refresh_from_db()
    # 09:00 Riga is 06:00 UTC; 5 Sep's slot has passed, so the next is 6 Sep. No 2-5 Sep backfill.
    assert schedule.next_occurrence_at == datetime(2026, 9, 6, 6, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_a_resumed_schedule_pauses_again_on_its_next_failure_until_a_run_completes(owner, agent):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    fail(materialize(schedule))
    services.resume_schedule(schedule, by=owner)
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == "paused"
    assert schedule.consecutive_failures == 3

    services.resume_schedule(schedule, by=owner)
    finish(materialize(schedule))
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == "active"
    assert schedule.consecutive_failures == 1


@pytest.mark.django_db(transaction=True)
def test_a_double_resume_gives_exactly_one_transition(owner, agent):
    schedule = make_schedule(owner, agent)
    services.pause_schedule(schedule, by=owner)

    results = race([lambda: services.resume_schedule(Schedule.objects.get(pk=schedule.pk), by=owner)] * 6)

    assert sum(isinstance(r, Schedule) for r in results) == 1
    assert sum(isinstance(r, services.NotPaused) for r in results) == 5
    assert PauseEvent.objects.filter(schedule=schedule, action="resume").count() == 1


@pytest.mark.django_db(transaction=True)
def test_resume_racing_a_failure_limit_pause_ends_consistent(owner, agent):
    for _ in range(10):
        schedule = make_schedule(owner, agent)
        fail(materialize(schedule))
        services.pause_schedule(schedule, by=owner)
        in_flight = materialize(schedule)

        results = race(
            [
                lambda pk=schedule.pk: services.resume_schedule(Schedule.objects.get(pk=pk), by=owner),
                lambda occurrence=in_flight: fail(occurrence),
            ]
        )

        assert not any(isinstance(r, Exception) for r in results), results
        schedule.refresh_from_db()
        assert schedule.consecutive_failures == 2
        events = list(PauseEvent.objects.filter(schedule=schedule).order_by("created_at", "id"))
        # Either the failure landed while paused (owner pause stays, then resume) or after the
        # resume (the failure-limit pause follows). Both leave an audit trail that explains it.
        if schedule.status == "paused":
            assert [e.reason for e in events] == ["owner", "", "failure_limit"]
            assert schedule.pause.run_id == in_flight.run_id
        else:
            assert schedule.status == "active"
            assert [e.action for e in events] == ["pause", "resume"]


@pytest.mark.django_db
def test_an_invalid_definition_pause_is_by_the_system_with_a_reason(owner, agent):
    schedule = make_schedule(owner, agent)
    assert services.pause_for_invalid_definition(schedule, detail="agent 'x' is retired") is True
    schedule.refresh_from_db()
    assert schedule.pause.reason == "invalid_definition"
    assert schedule.pause.actor is None
    assert schedule.pause.detail == "agent 'x' is retired"
    assert services.pause_for_invalid_definition(schedule, detail="again") is False


@pytest.mark.django_db
def test_a_one_time_schedule_resumed_after_its_time_keeps_its_slot_for_the_tick(owner, agent):
    when = timezone.now() + timedelta(minutes=5)
    schedule = make_schedule(owner, agent, run_at=when)
    services.pause_schedule(schedule, by=owner)
    services.resume_schedule(schedule, by=owner)
    schedule.refresh_from_db()
    assert schedule.next_occurrence_at == when
