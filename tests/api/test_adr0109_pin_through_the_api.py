"""docs/decisions/0002, point 4 through the API: an existing schedule adopts new limits only through an
explicit revision from an authorized API client. It governs occurrences materialized after it; runs
already materialized keep the limits they copied; earlier revisions stay byte for byte."""

from __future__ import annotations

import pytest
from django.db import connection

from runs.models import Run
from schedules.models import Occurrence
from tests.api.conftest import error_of
from tests.factories import finish, limits, make_agent, make_schedule, materialize, run_due

pytestmark = pytest.mark.django_db


def stored_revisions(schedule_id: int) -> list[tuple]:
    """The revision rows as PostgreSQL stores them, text for text."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT * FROM schedules_schedulerevision WHERE schedule_id = %s ORDER BY number",
            [schedule_id],
        )
        return [tuple(str(value) for value in row) for row in cursor.fetchall()]


def test_a_revision_pinned_through_the_api_governs_only_later_occurrences(owner, admin_api, owner_api):
    schedule = make_schedule(owner, make_agent())
    owner_api.patch(f"/schedules/{schedule.pk}", {"prompt": "A sharper prompt."})  # revision 2
    in_flight = materialize(schedule)
    before = stored_revisions(schedule.pk)
    old_limits = Run.objects.get(pk=in_flight.run_id).limits
    assert old_limits["max_cost"] == "5.00"

    new_limits = limits(
        max_cost="7.00",
        synthesis_reserve_steps=2,
        synthesis_reserve_model_calls=2,
        synthesis_reserve_cost="1.00",
    ).to_json()
    response = admin_api.post(
        f"/schedules/{schedule.pk}/revisions",
        {"limits": new_limits, "max_consecutive_failures": 3, "reason": "USD 7 for longer research"},
    )
    assert response.status_code == 201
    assert response.json()["number"] == 3

    # The run materialized before keeps what it copied; earlier revisions are untouched.
    assert Run.objects.get(pk=in_flight.run_id).limits == old_limits
    assert stored_revisions(schedule.pk)[:2] == before
    assert owner_api.get(f"/runs/{in_flight.run_id}").json()["limits"] == old_limits

    finish(in_flight)
    later = run_due(schedule)

    assert later is not None
    assert later.limits == new_limits
    assert Occurrence.objects.get(run=later).revision.number == 3
    occurrences = owner_api.get(f"/schedules/{schedule.pk}/occurrences").json()["items"]
    assert [(o["run_id"], o["revision"]) for o in occurrences] == [(later.pk, 3), (in_flight.run_id, 2)]
    assert owner_api.get(f"/runs/{later.pk}").json()["limits"] == new_limits
    detail = owner_api.get(f"/schedules/{schedule.pk}").json()
    assert detail["max_consecutive_failures"] == 3
    assert detail["revision"]["limits"] == new_limits
    assert stored_revisions(schedule.pk)[:2] == before


def test_schedule_update_through_the_api_cannot_change_limits(owner, owner_api):
    schedule = make_schedule(owner, make_agent())
    before = stored_revisions(schedule.pk)

    response = owner_api.patch(
        f"/schedules/{schedule.pk}",
        {"limits": limits(max_cost="7.00").to_json(), "max_consecutive_failures": 3},
    )

    assert response.status_code == 422
    assert error_of(response)["code"] == "limits_not_updatable"
    assert stored_revisions(schedule.pk) == before
