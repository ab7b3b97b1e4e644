"""PATCH /api/v1/schedules/{id}: schedule.update writes a new revision; limits are not updatable."""

from __future__ import annotations

import pytest

from schedules.models import Schedule, ScheduleRevision
from tests.api.conftest import error_of
from tests.factories import finish, make_schedule, materialize

pytestmark = pytest.mark.django_db


def test_an_edit_writes_a_new_revision_that_copies_the_limits(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    before = schedule.revision

    response = owner_api.patch(
        f"/schedules/{schedule.pk}",
        {"title": "Sharper briefing", "prompt": "A sharper prompt.", "cron": "30 8 * * 1-5"},
    )

    assert response.status_code == 200
    body = response.json()
    assert body["title"] == "Sharper briefing"
    assert body["cron"] == "30 8 * * 1-5"
    revision = body["revision"]
    assert revision["number"] == 2
    assert revision["path"] == "schedule.update"
    assert revision["prompt"] == "A sharper prompt."
    assert revision["limits"] == before.limits
    assert revision["max_consecutive_failures"] == before.max_consecutive_failures
    assert ScheduleRevision.objects.get(schedule=schedule, number=2).via == "api"


def test_an_edit_that_changes_nothing_writes_no_revision(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)

    response = owner_api.patch(f"/schedules/{schedule.pk}", {})

    assert response.status_code == 200
    assert response.json()["revision"]["number"] == 1


@pytest.mark.parametrize(
    ("patch", "fields"),
    [
        ({"max_cost": "8.00"}, ["max_cost"]),
        ({"synthesis_reserve_cost": "0.50"}, ["synthesis_reserve_cost"]),
        ({"max_consecutive_failures": 3}, ["max_consecutive_failures"]),
        ({"limits": {"max_cost": "8.00"}}, ["limits"]),
        ({"title": "ok", "max_steps": 50, "consecutive_failures": 0}, ["consecutive_failures", "max_steps"]),
    ],
)
def test_a_patch_touching_limits_is_422_limits_not_updatable(owner, agent, owner_api, patch, fields):
    schedule = make_schedule(owner, agent)

    response = owner_api.patch(f"/schedules/{schedule.pk}", patch)

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "limits_not_updatable"
    assert sorted(error["fields"]) == fields
    assert "explicit revision" in error["message"]
    assert schedule.revisions.count() == 1


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"title": 42}, "title"),
        ({"title": ""}, "title"),
        ({"prompt": None}, "prompt"),
        ({"cron": "every fortnight"}, "cron"),
        ({"timezone": "Nowhere/Special"}, "timezone"),
        ({"run_at": "2030-01-01T09:00:00+00:00"}, "run_at"),  # a recurring schedule has cron
        ({"agent": "someone-else"}, "agent"),
    ],
)
def test_an_invalid_edit_is_422_naming_the_field(owner, agent, owner_api, patch, field):
    schedule = make_schedule(owner, agent)

    response = owner_api.patch(f"/schedules/{schedule.pk}", patch)

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_body"
    assert field in error["fields"]
    assert schedule.revisions.count() == 1


def test_a_completed_schedule_cannot_be_edited(owner, agent, owner_api):
    from datetime import timedelta

    from django.utils import timezone

    schedule = make_schedule(owner, agent, run_at=timezone.now() + timedelta(hours=1))
    finish(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.COMPLETED

    response = owner_api.patch(f"/schedules/{schedule.pk}", {"title": "Too late"})

    assert response.status_code == 409
    assert error_of(response)["code"] == "schedule_completed"


def test_another_owners_schedule_is_404_even_for_an_admin(owner, agent, other_api, admin_api):
    schedule = make_schedule(owner, agent)

    assert other_api.patch(f"/schedules/{schedule.pk}", {"title": "Mine now"}).status_code == 404
    assert admin_api.patch(f"/schedules/{schedule.pk}", {"title": "Mine now"}).status_code == 404
    assert schedule.revisions.count() == 1
