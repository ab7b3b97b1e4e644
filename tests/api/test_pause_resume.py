"""POST /api/v1/schedules/{id}/pause and /resume: the same services as the dashboard and admin."""

from __future__ import annotations

import pytest

from schedules.models import PauseEvent
from tests.api.conftest import error_of
from tests.factories import fail, make_schedule, materialize

pytestmark = pytest.mark.django_db


def test_pausing_records_who_when_and_why(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)

    response = owner_api.post(f"/schedules/{schedule.pk}/pause")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "paused"
    assert body["pause"]["reason"] == "owner"
    assert body["pause"]["by"] == owner.username
    assert body["pause"]["run_id"] is None
    assert body["pause"]["at"].endswith("+00:00")
    event = PauseEvent.objects.get(schedule=schedule)
    assert (event.action, event.reason, event.actor) == ("pause", "owner", owner)


def test_pausing_a_paused_schedule_is_409_not_active(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    owner_api.post(f"/schedules/{schedule.pk}/pause")

    response = owner_api.post(f"/schedules/{schedule.pk}/pause")

    assert response.status_code == 409
    assert error_of(response)["code"] == "not_active"
    assert PauseEvent.objects.filter(schedule=schedule).count() == 1


def test_resuming_keeps_the_failure_count(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == "paused" and schedule.pause.reason == "failure_limit"

    response = owner_api.post(f"/schedules/{schedule.pk}/resume")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "active"
    assert body["pause"] is None
    assert body["consecutive_failures"] == 2
    assert body["next_occurrence_at"] is not None
    resume = PauseEvent.objects.filter(schedule=schedule, action="resume").get()
    assert resume.actor == owner and resume.failures_at_event == 2

    fail(materialize(schedule))  # the next failure pauses it again
    schedule.refresh_from_db()
    assert schedule.status == "paused"


def test_resuming_an_active_schedule_is_409_not_paused(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)

    response = owner_api.post(f"/schedules/{schedule.pk}/resume")

    assert response.status_code == 409
    assert error_of(response)["code"] == "not_paused"
    assert not PauseEvent.objects.exists()


def test_an_admin_pausing_someone_elses_schedule_is_an_admin_pause(owner, agent, admin_user, admin_api):
    schedule = make_schedule(owner, agent)

    body = admin_api.post(f"/schedules/{schedule.pk}/pause").json()

    assert body["pause"]["reason"] == "admin"
    assert body["pause"]["by"] == admin_user.username
    assert admin_api.post(f"/schedules/{schedule.pk}/resume").json()["status"] == "active"


def test_another_owner_cannot_pause_or_resume(owner, agent, other_api):
    schedule = make_schedule(owner, agent)

    assert other_api.post(f"/schedules/{schedule.pk}/pause").status_code == 404
    assert other_api.post(f"/schedules/{schedule.pk}/resume").status_code == 404
    assert not PauseEvent.objects.exists()


def test_get_on_a_post_only_route_is_405_in_the_error_shape(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)

    response = owner_api.get(f"/schedules/{schedule.pk}/pause")

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert response["Allow"] == "POST"
