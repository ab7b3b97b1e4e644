"""GET and POST /api/v1/schedules/{id}/revisions: the history, and explicit revisions (pinning)."""

from __future__ import annotations

import json

import pytest

from schedules.models import ScheduleRevision
from tests.api.conftest import error_of, valid_pin_body
from tests.factories import make_schedule, make_user

pytestmark = pytest.mark.django_db


def test_revisions_are_listed_newest_first_with_who_when_how_and_why(
    owner, agent, admin_user, admin_api, owner_api
):
    schedule = make_schedule(owner, agent)
    owner_api.patch(f"/schedules/{schedule.pk}", {"title": "Renamed"})
    admin_api.post(f"/schedules/{schedule.pk}/revisions", valid_pin_body())

    response = owner_api.get(f"/schedules/{schedule.pk}/revisions")

    assert response.status_code == 200
    items = response.json()["items"]
    assert [(r["number"], r["path"], r["created_by"]) for r in items] == [
        (3, "explicit", admin_user.username),
        (2, "schedule.update", owner.username),
        (1, "schedule.create", owner.username),
    ]
    assert items[0]["reason"] == "Research runs need USD 8 now."
    assert items[0]["limits"]["max_cost"] == "8.00"
    assert items[2]["limits"]["max_cost"] == "5.00"


def test_revisions_page_with_a_cursor(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    for n in range(4):
        owner_api.patch(f"/schedules/{schedule.pk}", {"title": f"Title {n}"})

    first = owner_api.get(f"/schedules/{schedule.pk}/revisions?limit=2").json()
    second = owner_api.get(first["next"]).json()
    third = owner_api.get(second["next"]).json()

    numbers = [r["number"] for page in (first, second, third) for r in page["items"]]
    assert numbers == [5, 4, 3, 2, 1]
    assert third["next"] is None


def test_an_admin_pins_an_explicit_revision(owner, agent, admin_user, admin_api):
    schedule = make_schedule(owner, agent)

    response = admin_api.post(f"/schedules/{schedule.pk}/revisions", valid_pin_body())

    assert response.status_code == 201
    body = response.json()
    assert body["number"] == 2
    assert body["path"] == "explicit"
    assert body["created_by"] == admin_user.username
    assert body["max_consecutive_failures"] == 3
    assert body["limits"] == valid_pin_body()["limits"]
    revision = ScheduleRevision.objects.get(schedule=schedule, number=2)
    assert revision.via == "api"
    assert revision.reason == "Research runs need USD 8 now."
    schedule.refresh_from_db()
    assert schedule.current_revision == revision


def test_an_owner_with_the_pin_permission_pins_their_own_schedule(agent, api_as):
    pinner = make_user("pinner", pin=True)
    schedule = make_schedule(pinner, agent)

    response = api_as(pinner, "pin_revision").post(f"/schedules/{schedule.pk}/revisions", valid_pin_body())

    assert response.status_code == 201


def test_pinning_without_the_scope_is_403(owner, agent, admin_user, api_as):
    schedule = make_schedule(owner, agent)

    response = api_as(admin_user, "read", "write").post(
        f"/schedules/{schedule.pk}/revisions", valid_pin_body()
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "missing_scope"
    assert schedule.revisions.count() == 1


def test_pinning_without_the_permission_is_403_even_with_a_valid_body(owner, agent, api_as):
    schedule = make_schedule(owner, agent)

    response = api_as(owner, "pin_revision").post(f"/schedules/{schedule.pk}/revisions", {"junk": True})

    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert schedule.revisions.count() == 1


def test_pinning_another_owners_schedule_is_404_for_a_non_admin(owner, agent, api_as):
    pinner = make_user("pinner", pin=True)  # may pin, but is not staff
    schedule = make_schedule(owner, agent)

    response = api_as(pinner, "pin_revision").post(f"/schedules/{schedule.pk}/revisions", valid_pin_body())

    assert response.status_code == 404
    assert schedule.revisions.count() == 1


def test_listing_another_owners_revisions_is_404(owner, agent, other_api):
    schedule = make_schedule(owner, agent)

    assert other_api.get(f"/schedules/{schedule.pk}/revisions").status_code == 404


def with_limits(**changes):
    body = valid_pin_body()
    body["limits"] = {**body["limits"], **changes}
    return body


def without(key):
    body = valid_pin_body()
    del body[key]
    return body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (with_limits(synthesis_reserve_cost="8.00"), "limits.synthesis_reserve_cost"),
        (with_limits(synthesis_reserve_steps=10), "limits.synthesis_reserve_steps"),
        (with_limits(synthesis_reserve_tool_calls=6), "limits.synthesis_reserve_tool_calls"),
        (with_limits(max_steps=-1), "limits.max_steps"),
        (with_limits(max_tool_calls=-3), "limits.max_tool_calls"),
        (with_limits(max_cost="-5.00"), "limits.max_cost"),
        (with_limits(synthesis_reserve_cost="-0.01"), "limits.synthesis_reserve_cost"),
        (with_limits(max_cost="0"), "limits.max_cost"),
        (with_limits(max_cost=1.5), "limits.max_cost"),
        (with_limits(max_cost="NaN"), "limits.max_cost"),
        (with_limits(max_cost="Infinity"), "limits.max_cost"),
        (with_limits(max_cost="5.0000001"), "limits.max_cost"),
        (with_limits(max_cost="five"), "limits.max_cost"),
        (with_limits(max_steps="10"), "limits.max_steps"),
        (with_limits(max_steps=10.0), "limits.max_steps"),
        (with_limits(max_steps=True), "limits.max_steps"),
        (with_limits(turbo=True), "limits.turbo"),
        ({**valid_pin_body(), "limits": {"max_cost": "8.00"}}, "limits.max_steps"),
        ({**valid_pin_body(), "limits": "generous"}, "limits"),
        ({**valid_pin_body(), "max_consecutive_failures": "3"}, "max_consecutive_failures"),
        ({**valid_pin_body(), "max_consecutive_failures": 0}, "max_consecutive_failures"),
        ({**valid_pin_body(), "reason": "   "}, "reason"),
        ({**valid_pin_body(), "reason": 7}, "reason"),
        ({**valid_pin_body(), "note": "extra"}, "note"),
        (without("reason"), "reason"),
        (without("limits"), "limits"),
        (without("max_consecutive_failures"), "max_consecutive_failures"),
    ],
)
def test_an_invalid_explicit_revision_is_422_naming_the_field(owner, agent, admin_api, body, field):
    schedule = make_schedule(owner, agent)

    response = admin_api.post(f"/schedules/{schedule.pk}/revisions", body)

    assert response.status_code == 422, response.content
    error = error_of(response)
    assert error["code"] == "invalid_body"
    assert field in error["fields"], error
    assert schedule.revisions.count() == 1


@pytest.mark.parametrize("number", ["1e309", "-1e309", "1e308", "5.00", "NaN", "Infinity"])
def test_a_json_number_as_cost_is_refused_as_a_float(owner, agent, admin_api, number):
    schedule = make_schedule(owner, agent)
    text = json.dumps(valid_pin_body()).replace('"max_cost": "8.00"', f'"max_cost": {number}')
    assert number in text

    response = admin_api.post(f"/schedules/{schedule.pk}/revisions", raw=text)

    assert response.status_code == 422
    error = error_of(response)
    assert "limits.max_cost" in error["fields"]
    assert "floating-point" in error["fields"]["limits.max_cost"]


def test_the_reserve_message_names_both_fields_and_values(owner, agent, admin_api):
    schedule = make_schedule(owner, agent)

    response = admin_api.post(
        f"/schedules/{schedule.pk}/revisions", with_limits(max_cost="0.80", synthesis_reserve_cost="1.00")
    )

    assert error_of(response)["fields"]["limits.synthesis_reserve_cost"] == (
        "synthesis_reserve_cost must be below max_cost (1.00 ≥ 0.80)"
    )


def test_a_body_over_the_size_cap_is_413(owner, agent, admin_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    schedule = make_schedule(owner, agent)

    response = admin_api.post(
        f"/schedules/{schedule.pk}/revisions", {**valid_pin_body(), "reason": "x" * 4096}
    )

    assert response.status_code == 413
    assert error_of(response)["code"] == "body_too_large"
    assert schedule.revisions.count() == 1
