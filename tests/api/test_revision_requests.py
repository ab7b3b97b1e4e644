"""docs/contract.md#json-api's revision-request routes: the owner asks (`write`), admins list the queue
and decide (`pin_revision` and the pin permission). Every response is checked against the served schema."""

from __future__ import annotations

import pytest

from schedules.models import RevisionRequest, RevisionRequestEvent, ScheduleRevision
from tests.api.conftest import Api, error_of, token_for, valid_ask_body, valid_pin_body
from tests.concurrency import race
from tests.factories import make_schedule, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def schedule(owner, agent):
    return make_schedule(owner, agent)


def ask(owner_api: Api, schedule) -> dict:
    response = owner_api.post(f"/schedules/{schedule.pk}/revision-requests", valid_ask_body())
    assert response.status_code == 201, response.content
    return response.json()


def test_the_owner_asks_and_gets_the_request_back(owner_api, schedule, owner):
    body = ask(owner_api, schedule)
    assert (body["state"], body["schedule_id"], body["base_revision"], body["requested_by"]) == (
        "open",
        schedule.pk,
        1,
        owner.username,
    )
    assert body["limits"] == valid_pin_body()["limits"]
    assert (body["decided_at"], body["decline_reason"], body["revision"]) == (None, None, None)
    assert RevisionRequestEvent.objects.get().via == "api"


def test_asking_again_while_one_is_open_is_a_409_naming_why(owner_api, schedule):
    ask(owner_api, schedule)
    again = owner_api.post(f"/schedules/{schedule.pk}/revision-requests", valid_ask_body())
    assert again.status_code == 409 and error_of(again)["code"] == "request_open"
    assert RevisionRequest.objects.count() == 1


def test_another_owners_schedule_is_404_and_even_an_admin_cannot_ask_for_the_owner(
    other_api, admin_api, schedule
):
    for api in (other_api, admin_api):
        response = api.post(f"/schedules/{schedule.pk}/revision-requests", valid_ask_body())
        assert response.status_code == 404
    assert not RevisionRequest.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**valid_ask_body(), "reason": ""}, "reason"),
        (
            {**valid_ask_body(), "limits": {**valid_pin_body()["limits"], "max_cost": "5_0"}},
            "limits.max_cost",
        ),
        ({**valid_ask_body(), "max_consecutive_failures": 0}, "max_consecutive_failures"),
        ({"limits": {}, "reason": "x"}, "limits.max_steps"),
    ],
)
def test_a_bad_request_body_is_a_422_naming_the_field(owner_api, schedule, body, field):
    response = owner_api.post(f"/schedules/{schedule.pk}/revision-requests", body)
    assert response.status_code == 422
    assert field in error_of(response)["fields"]


def test_the_queue_lists_open_requests_oldest_first_and_pages(owner, admin_api, agent):
    owner_api = Api(token_for(owner, "read", "write"))
    schedules = [make_schedule(owner, agent, title=f"S{i}") for i in range(3)]
    asked = [ask(owner_api, s)["id"] for s in schedules]
    first = admin_api.get("/revision-requests?state=open&limit=2")
    assert first.status_code == 200
    page = first.json()
    assert [item["id"] for item in page["items"]] == asked[:2]
    rest = admin_api.get(page["next"]).json()
    assert [item["id"] for item in rest["items"]] == asked[2:] and rest["next"] is None
    bad = admin_api.get("/revision-requests?state=maybe")
    assert bad.status_code == 422 and "state" in error_of(bad)["fields"]


def test_listing_needs_the_pin_permission_as_well_as_the_scope(owner, schedule):
    holder = Api(token_for(owner, "read", "write", "pin_revision"))  # the permission was withdrawn
    response = holder.get("/revision-requests?state=open")
    assert response.status_code == 403 and error_of(response)["code"] == "permission_denied"


def test_pinning_writes_the_explicit_revision_that_records_the_request(
    owner_api, admin_api, schedule, admin_user
):
    asked = ask(owner_api, schedule)
    response = admin_api.post(
        f"/revision-requests/{asked['id']}/decision",
        {"decision": "pin", **valid_pin_body(), "base_revision": 1},
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["revision"], body["decided_by"]) == ("pinned", 2, admin_user.username)
    revision = ScheduleRevision.objects.get(schedule=schedule, number=2)
    assert (revision.request_id, revision.via, revision.path) == (asked["id"], "api", "explicit")
    revisions = owner_api.get(f"/schedules/{schedule.pk}/revisions").json()["items"]
    assert revisions[0]["number"] == 2 and revisions[0]["limits"] == valid_pin_body()["limits"]


def test_declining_keeps_the_limits_and_says_why(owner_api, admin_api, schedule):
    asked = ask(owner_api, schedule)
    response = admin_api.post(
        f"/revision-requests/{asked['id']}/decision", {"decision": "decline", "reason": "No."}
    )
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["decline_reason"]) == ("declined", "No.")
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "pin", "reason": "x"}, "limits"),
        ({"decision": "decline", "reason": "x", "limits": valid_pin_body()["limits"]}, "limits"),
        ({"decision": "decline", "reason": ""}, "reason"),
        ({"decision": "perhaps", "reason": "x"}, "decision"),
    ],
)
def test_a_bad_decision_is_a_422_and_decides_nothing(owner_api, admin_api, schedule, body, field):
    asked = ask(owner_api, schedule)
    response = admin_api.post(f"/revision-requests/{asked['id']}/decision", body)
    assert response.status_code == 422 and field in error_of(response)["fields"]
    assert RevisionRequest.objects.get().state == "open"


def test_deciding_twice_is_a_409(owner_api, admin_api, schedule):
    asked = ask(owner_api, schedule)
    path = f"/revision-requests/{asked['id']}/decision"
    assert admin_api.post(path, {"decision": "decline", "reason": "No."}).status_code == 200
    again = admin_api.post(path, {"decision": "pin", **valid_pin_body()})
    assert again.status_code == 409 and error_of(again)["code"] == "request_decided"


def test_a_stale_base_revision_is_a_409_and_pins_nothing(owner_api, admin_api, schedule):
    asked = ask(owner_api, schedule)
    admin_api.post(f"/schedules/{schedule.pk}/revisions", valid_pin_body())  # revision 2 meanwhile
    response = admin_api.post(
        f"/revision-requests/{asked['id']}/decision",
        {"decision": "pin", **valid_pin_body(), "base_revision": 1},
    )
    assert response.status_code == 409 and error_of(response)["code"] == "revision_changed"
    assert RevisionRequest.objects.get().state == "open"


def test_someone_who_may_pin_but_is_no_admin_sees_only_requests_on_their_own_schedules(owner_api, schedule):
    asked = ask(owner_api, schedule)
    pinner = Api(token_for(make_user("pinner", pin=True)))
    assert pinner.get("/revision-requests").json()["items"] == []
    response = pinner.post(
        f"/revision-requests/{asked['id']}/decision", {"decision": "decline", "reason": "x"}
    )
    assert response.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_two_admins_deciding_at_once_get_one_decision_and_one_409(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    asked = ask(Api(token_for(owner, "read", "write")), schedule)
    path = f"/revision-requests/{asked['id']}/decision"
    first, second = token_for(admin_user), token_for(make_user("grace", staff=True, pin=True))
    results = race(
        [
            lambda: Api(first).post(path, {"decision": "pin", **valid_pin_body()}),
            lambda: Api(second).post(path, {"decision": "decline", "reason": "No."}),
        ]
    )
    assert not [r for r in results if isinstance(r, Exception)]
    assert sorted(r.status_code for r in results) == [200, 409]
    assert RevisionRequestEvent.objects.exclude(action="requested").count() == 1


@pytest.mark.parametrize("request_id", ["0", "424242", "99999999999999999999999", "abc", "-1"])
def test_a_missing_or_malformed_request_id_is_404(admin_api, request_id):
    response = admin_api.post(
        f"/revision-requests/{request_id}/decision", {"decision": "decline", "reason": "x"}
    )
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"
    asked = admin_api.post("/schedules/99999999999999999999999/revision-requests", valid_ask_body())
    assert asked.status_code == 404


def test_a_pin_decision_with_a_cap_below_its_own_cost_is_a_422_naming_monthly_cap_and_decides_nothing(
    owner_api, admin_api, schedule
):
    asked = ask(owner_api, schedule)
    body = {"decision": "pin", **valid_pin_body(), "monthly_cap": "1.00"}
    body["limits"] = {**body["limits"], "max_cost": "6.00"}
    response = admin_api.post(f"/revision-requests/{asked['id']}/decision", body)
    assert response.status_code == 422 and error_of(response)["code"] == "invalid_body"
    assert error_of(response)["fields"] == {
        "monthly_cap": "monthly_cap: USD 1.00 is below the cost limit of one run (USD 6.00), "
        "so it could never admit a run"
    }
    assert RevisionRequest.objects.get(pk=asked["id"]).state == "open"
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1
