"""schedule.update writes a new revision copying limits and the failure limit, and refuses limits."""

from __future__ import annotations

import zoneinfo
from datetime import timedelta

import pytest
from django.utils import timezone

from schedules import services
from schedules.models import ScheduleRevision
from schedules.schemas import InvalidSchedule, LimitsNotUpdatable, parse_update
from tests.factories import make_schedule

pytestmark = pytest.mark.django_db


def test_update_writes_a_new_revision_that_copies_limits_and_failure_limit(owner, agent):
    schedule = make_schedule(owner, agent)
    first = schedule.revision

    updated = services.update_schedule(
        schedule, parse_update({"title": "Evening briefing", "cron": "0 18 * * *"}), by=owner, via="test"
    )

    revision = updated.revision
    assert revision.number == 2
    assert revision.path == ScheduleRevision.Path.UPDATE
    assert revision.title == updated.title == "Evening briefing"
    assert revision.cron == "0 18 * * *"
    assert revision.limits == first.limits
    assert revision.max_consecutive_failures == first.max_consecutive_failures
    assert revision.agent_id == first.agent_id
    assert revision.created_by == owner
    local = updated.next_occurrence_at.astimezone(zoneinfo.ZoneInfo("Europe/Riga"))
    assert local.hour == 18


@pytest.mark.parametrize(
    "field", ["max_cost", "synthesis_reserve_cost", "max_steps", "max_consecutive_failures", "limits"]
)
def test_update_refuses_limits_and_the_failure_limit(owner, agent, field):
    schedule = make_schedule(owner, agent)
    with pytest.raises(LimitsNotUpdatable) as caught:
        services.update_schedule(schedule, parse_update({"title": "x", field: 9}), by=owner, via="test")
    assert "explicit revision" in caught.value.fields[field]
    assert schedule.revisions.count() == 1


def test_update_cannot_change_the_failure_count(owner, agent):
    make_schedule(owner, agent)
    with pytest.raises(LimitsNotUpdatable):
        parse_update({"consecutive_failures": 0})


def test_an_update_that_changes_nothing_writes_no_revision(owner, agent):
    schedule = make_schedule(owner, agent)
    services.update_schedule(schedule, parse_update({"title": schedule.title}), by=owner, via="test")
    assert schedule.revisions.count() == 1


def test_kind_specific_fields_are_checked(owner, agent):
    recurring = make_schedule(owner, agent)
    with pytest.raises(InvalidSchedule) as caught:
        services.update_schedule(
            recurring,
            parse_update({"run_at": (timezone.now() + timedelta(days=1)).isoformat()}),
            by=owner,
            via="t",
        )
    assert "run_at" in caught.value.fields
    one_time = make_schedule(owner, agent, run_at=timezone.now() + timedelta(hours=2))
    with pytest.raises(InvalidSchedule) as caught:
        services.update_schedule(one_time, parse_update({"cron": "0 9 * * *"}), by=owner, via="t")
    assert "cron" in caught.value.fields


def test_an_invalid_new_recurrence_is_refused_and_nothing_is_written(owner, agent):
    schedule = make_schedule(owner, agent)
    with pytest.raises(InvalidSchedule) as caught:
        services.update_schedule(schedule, parse_update({"timezone": "Nowhere/Town"}), by=owner, via="t")
    assert "timezone" in caught.value.fields
    assert schedule.revisions.count() == 1


def test_a_completed_schedule_cannot_be_edited(owner, agent):
    from schedules.models import Schedule

    schedule = make_schedule(owner, agent, run_at=timezone.now() + timedelta(hours=1))
    Schedule.objects.filter(pk=schedule.pk).update(status=Schedule.Status.COMPLETED)
    with pytest.raises(services.ScheduleCompleted):
        services.update_schedule(schedule, parse_update({"title": "Later"}), by=owner, via="t")
