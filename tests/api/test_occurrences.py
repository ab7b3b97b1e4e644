"""GET /api/v1/schedules/{id}/occurrences: newest first, outcome, revision number, run id."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.services import delete_conversation
from schedules.models import Occurrence
from tests.api.conftest import valid_pin_body
from tests.factories import fail, finish, make_schedule, materialize

pytestmark = pytest.mark.django_db


def test_occurrences_are_newest_first_with_outcome_revision_and_run(owner, agent, admin_api, owner_api):
    schedule = make_schedule(owner, agent)
    start = timezone.now() - timedelta(days=3)
    first = materialize(schedule, scheduled_for=start)
    finish(first)
    admin_api.post(f"/schedules/{schedule.pk}/revisions", valid_pin_body())
    second = materialize(schedule, scheduled_for=start + timedelta(days=1))
    run = fail(second)
    Occurrence.objects.create(
        schedule=schedule,
        scheduled_for=start + timedelta(days=2),
        revision=schedule.revisions.get(number=2),
        outcome=Occurrence.Outcome.MISSED,
    )

    response = owner_api.get(f"/schedules/{schedule.pk}/occurrences")

    assert response.status_code == 200
    items = response.json()["items"]
    assert [(o["outcome"], o["revision"]) for o in items] == [("missed", 2), ("failed", 2), ("completed", 1)]
    assert items[0]["run_id"] is None
    assert items[1]["run_id"] == run.pk
    assert items[1]["id"] == second.pk
    assert items[2]["scheduled_for"] == start.isoformat()


def test_the_run_id_is_null_once_its_conversation_is_deleted(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    run = fail(materialize(schedule))
    delete_conversation(run.conversation)

    [item] = owner_api.get(f"/schedules/{schedule.pk}/occurrences").json()["items"]

    assert item["outcome"] == "failed"
    assert item["run_id"] is None


def test_occurrences_page_with_a_bounded_number_of_queries(
    owner, agent, owner_api, django_assert_max_num_queries
):
    schedule = make_schedule(owner, agent)
    start = timezone.now() - timedelta(days=30)
    for day in range(25):
        finish(materialize(schedule, scheduled_for=start + timedelta(days=day)))

    seen = []
    url = f"/schedules/{schedule.pk}/occurrences?limit=10"
    while url:
        with django_assert_max_num_queries(5):  # token, last use, the schedule, the page
            body = owner_api.get(url).json()
        seen += [o["id"] for o in body["items"]]
        url = body["next"]

    assert len(seen) == len(set(seen)) == 25


def test_another_owners_occurrences_are_404(owner, agent, other_api):
    schedule = make_schedule(owner, agent)

    assert other_api.get(f"/schedules/{schedule.pk}/occurrences").status_code == 404
