"""POST /api/v1/schedules: through the schedule.create policy, or 422 naming each bad field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from schedules.models import Schedule, ScheduleRevision
from tests.api.conftest import error_of
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def body(**overrides):
    values = {
        "title": "Evening digest",
        "prompt": "Summarise the day's news.",
        "agent": "researcher",
        "cron": "0 18 * * *",
        "timezone": "Europe/Riga",
    }
    values.update(overrides)
    return {key: value for key, value in values.items() if value is not None}


def test_a_recurring_schedule_is_created_with_the_policy_limits(owner, agent, owner_api):
    response = owner_api.post("/schedules", body())

    assert response.status_code == 201
    created = response.json()
    schedule = Schedule.objects.get(pk=created["id"])
    assert schedule.owner == owner
    assert created["kind"] == "recurring"
    assert created["status"] == "active"
    assert created["max_consecutive_failures"] == 2
    revision = created["revision"]
    assert revision["number"] == 1
    assert revision["path"] == "schedule.create"
    assert revision["created_by"] == owner.username
    assert revision["limits"] == {
        "max_steps": 10,
        "max_model_calls": 10,
        "max_tool_calls": 6,
        "max_cost": "5.00",
        "synthesis_reserve_steps": 2,
        "synthesis_reserve_model_calls": 2,
        "synthesis_reserve_tool_calls": 0,
        "synthesis_reserve_cost": "1.00",
    }
    assert schedule.revision.via == "api"


def test_a_one_time_schedule_takes_run_at_with_an_offset(owner, agent, owner_api):
    when = (timezone.now() + timedelta(days=1)).replace(microsecond=0)

    response = owner_api.post("/schedules", body(cron=None, timezone=None, run_at=when.isoformat()))

    assert response.status_code == 201
    created = response.json()
    assert created["kind"] == "one_time"
    assert created["cron"] is None
    assert created["run_at"] == when.isoformat()
    assert created["next_occurrence_at"] == when.isoformat()


def test_a_low_agent_cost_limit_omits_the_cost_reserve(owner, owner_api):
    make_agent("frugal", cost_limit="0.80")

    response = owner_api.post("/schedules", body(agent="frugal"))

    limits = response.json()["revision"]["limits"]
    assert limits["max_cost"] == "0.80"
    assert limits["synthesis_reserve_cost"] == "0.00"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"title": None}, "title"),
        ({"title": ""}, "title"),
        ({"title": 123}, "title"),
        ({"prompt": ["a", "list"]}, "prompt"),
        ({"agent": "no-such-agent"}, "agent"),
        ({"cron": "61 25 * * *"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": None}, "timezone"),
        ({"cron": None, "timezone": None}, "cron"),
        ({"run_at": "2030-01-01T09:00:00+00:00"}, "cron"),  # both forms
        ({"cron": None, "run_at": "2030-01-01T09:00:00"}, "run_at"),  # no offset
        ({"cron": None, "run_at": "2020-01-01T09:00:00+00:00"}, "run_at"),  # in the past
        ({"cron": None, "run_at": 1767258000}, "run_at"),
        ({"max_cost": "1.00"}, "max_cost"),  # limits are the policy's, not the caller's
        ({"limits": {}}, "limits"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_an_invalid_body_is_422_naming_the_field(agent, owner_api, overrides, field):
    response = owner_api.post("/schedules", body(**overrides))

    assert response.status_code == 422, response.content
    error = error_of(response)
    assert error["code"] == "invalid_body"
    assert field in error["fields"], error
    assert error["fields"][field]
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("", "malformed_json"),
        ("{", "malformed_json"),
        ("{'title': 'single quotes'}", "malformed_json"),
        ("[1, 2]", "invalid_body"),
        ('"a string"', "invalid_body"),
        ("null", "invalid_body"),
        ("[" * 5000 + "]" * 5000, "malformed_json"),
        ('{"max_steps": ' + "9" * 5000 + "}", "malformed_json"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_422(agent, owner_api, raw, code):
    response = owner_api.post("/schedules", raw=raw)

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == code
    assert "body" in error["fields"]


def test_text_postgresql_cannot_store_is_422_not_500(agent, owner_api):
    response = owner_api.post("/schedules", body(title="nul\u0000byte"))

    assert response.status_code == 422
    assert "title" in error_of(response)["fields"]


def test_a_lone_surrogate_is_422_not_500(agent, owner_api):
    raw = '{"title": "\\ud800", "prompt": "p", "agent": "researcher", "cron": "0 9 * * *", "timezone": "UTC"}'

    response = owner_api.post("/schedules", raw=raw)

    assert response.status_code == 422
    assert "title" in error_of(response)["fields"]


def test_a_read_only_token_cannot_create(owner, agent, api_as):
    response = api_as(owner, "read").post("/schedules", body())

    assert response.status_code == 403
    assert not ScheduleRevision.objects.exists()
