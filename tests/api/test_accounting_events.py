"""GET /api/v1/accounting-events: content-free schedule.run_accounted events, newest first."""

from __future__ import annotations

import pytest

from runs.failures import Diagnostics, ProviderTransientError
from runs.services import delete_conversation
from tests.api.conftest import error_of
from tests.factories import fail, finish, make_schedule, materialize

pytestmark = pytest.mark.django_db

EVENT_FIELDS = {
    "event",
    "created_at",
    "schedule_id",
    "occurrence_id",
    "scheduled_for",
    "revision",
    "run_id",
    "status",
    "usage",
    "failure",
}


def test_a_schedules_events_are_listed_newest_first(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    other = make_schedule(owner, agent, title="Other")
    completed = finish(materialize(schedule))
    failed = fail(
        materialize(schedule),
        ProviderTransientError("overloaded", diagnostics=Diagnostics(provider="anthropic", http_status=529)),
    )
    finish(materialize(other))

    response = owner_api.get(f"/accounting-events?schedule={schedule.pk}")

    assert response.status_code == 200
    items = response.json()["items"]
    assert [e["run_id"] for e in items] == [failed.pk, completed.pk]
    newest = items[0]
    assert set(newest) == EVENT_FIELDS
    assert newest["event"] == "schedule.run_accounted"
    assert newest["schedule_id"] == schedule.pk
    assert newest["status"] == "failed"
    assert newest["revision"] == 1
    assert newest["failure"] == {
        "reason": "provider_error",
        "error_class": "ProviderTransientError",
        "provider": "anthropic",
        "http_status": 529,
    }
    assert items[1]["failure"] is None
    assert items[1]["usage"]["cost"] == "0.00"


def test_without_a_filter_every_event_of_the_owner_is_listed(owner, agent, other_owner, owner_api):
    mine = finish(materialize(make_schedule(owner, agent)))
    finish(materialize(make_schedule(other_owner, agent)))

    items = owner_api.get("/accounting-events").json()["items"]

    assert [e["run_id"] for e in items] == [mine.pk]


def test_events_outlive_the_conversation_and_the_schedule(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    run = fail(materialize(schedule))
    schedule_id = schedule.pk
    delete_conversation(run.conversation)
    schedule.delete()

    items = owner_api.get(f"/accounting-events?schedule={schedule_id}").json()["items"]

    assert [(e["run_id"], e["failure"]["reason"]) for e in items] == [(run.pk, "budget_exhausted")]


def test_another_owners_events_are_not_shown(owner, agent, other_api):
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))

    assert other_api.get(f"/accounting-events?schedule={schedule.pk}").json()["items"] == []


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5", "99999999999999999999"])
def test_a_bad_schedule_filter_is_422_naming_it(owner_api, value):
    response = owner_api.get(f"/accounting-events?schedule={value}")

    assert response.status_code == 422
    assert "schedule" in error_of(response)["fields"]


def test_events_page_with_a_cursor(owner, agent, owner_api, django_assert_max_num_queries):
    schedule = make_schedule(owner, agent)
    runs = [finish(materialize(schedule)) for _ in range(5)]

    with django_assert_max_num_queries(4):
        first = owner_api.get(f"/accounting-events?schedule={schedule.pk}&limit=3").json()
    second = owner_api.get(first["next"]).json()

    assert [e["run_id"] for e in first["items"] + second["items"]] == [r.pk for r in reversed(runs)]
    assert second["next"] is None
