"""GET /api/v1/schedules/{id}: one schedule, its current revision and its last occurrences."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.api.conftest import error_of
from tests.factories import fail, finish, make_schedule, materialize

pytestmark = pytest.mark.django_db


def test_a_schedule_comes_with_its_revision_and_its_newest_occurrences(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    start = timezone.now() - timedelta(days=20)
    for day in range(12):
        occurrence = materialize(schedule, scheduled_for=start + timedelta(days=day))
        if day % 2:
            finish(occurrence)
        else:
            fail(occurrence)

    response = owner_api.get(f"/schedules/{schedule.pk}")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == schedule.pk
    assert body["revision"]["number"] == 1
    occurrences = body["occurrences"]
    assert len(occurrences) == 10
    moments = [o["scheduled_for"] for o in occurrences]
    assert moments == sorted(moments, reverse=True)
    assert moments[0] == (start + timedelta(days=11)).isoformat()
    assert {o["outcome"] for o in occurrences} == {"completed", "failed"}
    assert set(occurrences[0]) == {"id", "scheduled_for", "outcome", "skip_reason", "revision", "run_id"}
    assert {o["skip_reason"] for o in occurrences} == {None}
    assert body["last_run"]["status"] == "completed"
    assert body["consecutive_failures"] == 0


def test_another_owners_schedule_is_404(owner, agent, other_api):
    schedule = make_schedule(owner, agent)

    response = other_api.get(f"/schedules/{schedule.pk}")

    assert response.status_code == 404
    assert error_of(response) == {"code": "not_found", "message": "Not found, or not yours.", "fields": {}}


@pytest.mark.parametrize("schedule_id", ["0", "424242", "99999999999999999999999", "abc", "-1", "1.5"])
def test_a_missing_or_malformed_id_is_404(owner_api, schedule_id):
    response = owner_api.get(f"/schedules/{schedule_id}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_an_admin_may_read_any_schedule(owner, agent, admin_api):
    schedule = make_schedule(owner, agent)

    assert admin_api.get(f"/schedules/{schedule.pk}").status_code == 200
