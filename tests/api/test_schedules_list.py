"""GET /api/v1/schedules: the owner's schedules, newest first, paged, filtered by status."""

from __future__ import annotations

import base64
import json

import pytest

from runs.failures import Diagnostics, ProviderTransientError
from schedules import services
from tests.api.conftest import Api, error_of, token_for
from tests.factories import fail, make_agent, make_schedule, materialize

pytestmark = pytest.mark.django_db

SCHEDULE_FIELDS = {
    "id",
    "title",
    "agent",
    "kind",
    "status",
    "cron",
    "timezone",
    "run_at",
    "pause",
    "consecutive_failures",
    "max_consecutive_failures",
    "next_occurrence_at",
    "revision",
    "last_run",
}
REVISION_FIELDS = {
    "number",
    "created_at",
    "path",
    "created_by",
    "reason",
    "prompt",
    "cron",
    "timezone",
    "run_at",
    "limits",
    "max_consecutive_failures",
    "monthly_cap",  # docs/contract.md#monthly-cap-per-schedule: null, none pinned
    # docs/contract.md#conversations: where a revision came from, and the conversation of one written in
    # chat.
    "via",
    "conversation_id",
}


def paused_after_two_failures(owner, agent, title="Paused briefing"):
    schedule = make_schedule(owner, agent, title=title)
    fail(materialize(schedule))
    failure = ProviderTransientError(
        "upstream overloaded",
        diagnostics=Diagnostics(provider="openai", provider_code="server_error", http_status=503),
    )
    run = fail(materialize(schedule), failure)
    schedule.refresh_from_db()
    assert schedule.status == "paused"
    return schedule, run


def test_the_list_shows_each_schedule_with_the_contract_fields(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)

    response = owner_api.get("/schedules")

    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None
    [item] = body["items"]
    assert set(item) == SCHEDULE_FIELDS
    assert set(item["revision"]) == REVISION_FIELDS
    assert item["id"] == schedule.pk
    assert item["agent"] == agent.name
    assert item["kind"] == "recurring"
    assert item["status"] == "active"
    assert item["cron"] == "0 9 * * *"
    assert item["timezone"] == "Europe/Riga"
    assert item["run_at"] is None
    assert item["pause"] is None
    assert item["last_run"] is None
    assert item["consecutive_failures"] == 0
    assert item["max_consecutive_failures"] == 2
    assert item["revision"]["number"] == 1
    assert item["revision"]["limits"]["max_cost"] == "5.00"
    assert item["revision"]["limits"]["synthesis_reserve_cost"] == "1.00"
    assert item["next_occurrence_at"].endswith("+00:00")


def test_status_paused_lists_paused_schedules_with_the_pause_and_the_classified_last_run(
    owner, agent, owner_api
):
    make_schedule(owner, agent, title="Still active")
    paused, run = paused_after_two_failures(owner, agent)

    response = owner_api.get("/schedules?status=paused")

    assert response.status_code == 200
    [item] = response.json()["items"]
    assert item["id"] == paused.pk
    assert item["status"] == "paused"
    assert item["consecutive_failures"] == 2
    assert item["pause"]["reason"] == "failure_limit"
    assert item["pause"]["by"] is None  # the system
    assert item["pause"]["run_id"] == run.pk
    assert item["last_run"]["run_id"] == run.pk
    assert item["last_run"]["status"] == "failed"
    assert item["last_run"]["failure"] == {
        "reason": "provider_error",
        "error_class": "ProviderTransientError",
        "provider": "openai",
        "provider_code": "server_error",
        "http_status": 503,
    }


def test_the_last_run_is_still_shown_after_its_conversation_is_deleted(owner, agent, owner_api):
    from runs.services import delete_conversation

    _, run = paused_after_two_failures(owner, agent)
    delete_conversation(run.conversation)

    [item] = owner_api.get("/schedules").json()["items"]

    assert item["last_run"]["run_id"] == run.pk
    assert item["last_run"]["failure"]["error_class"] == "ProviderTransientError"


@pytest.mark.parametrize("value", ["nope", "PAUSED", "1"])
def test_an_unknown_status_filter_is_422_naming_it(owner_api, value):
    response = owner_api.get(f"/schedules?status={value}")

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_parameter"
    assert "status" in error["fields"]


def test_another_owners_schedules_are_not_listed(owner, agent, other_owner, other_api):
    make_schedule(owner, agent)
    mine = make_schedule(other_owner, agent, title="Mallory's")

    items = other_api.get("/schedules").json()["items"]

    assert [item["id"] for item in items] == [mine.pk]


def test_an_admin_lists_every_owners_schedules(owner, other_owner, agent, admin_api):
    first = make_schedule(owner, agent)
    second = make_schedule(other_owner, agent)

    items = admin_api.get("/schedules").json()["items"]

    assert {item["id"] for item in items} == {first.pk, second.pk}


def test_pages_are_newest_first_and_the_next_link_walks_every_schedule_once(owner, agent, owner_api):
    created = [make_schedule(owner, agent, title=f"Schedule {n}").pk for n in range(7)]

    seen: list[int] = []
    url: str | None = "/schedules?limit=3"
    pages = 0
    while url:
        body = owner_api.get(url).json()
        assert len(body["items"]) <= 3
        seen += [item["id"] for item in body["items"]]
        url = body["next"]
        if url:
            assert url.startswith("http://testserver/api/v1/schedules?")
            assert "limit=3" in url
        pages += 1

    assert pages == 3
    assert seen == list(reversed(created))


def test_a_page_does_not_shift_when_schedules_are_added_meanwhile(owner, agent, owner_api):
    old = [make_schedule(owner, agent).pk for _ in range(4)]
    first = owner_api.get("/schedules?limit=2").json()
    make_schedule(owner, agent, title="New while paging")

    second = owner_api.get(first["next"]).json()

    assert [item["id"] for item in first["items"] + second["items"]] == list(reversed(old))


@pytest.mark.parametrize(
    "query",
    ["cursor=not-a-cursor", "cursor=WzFd", "cursor=" + "A" * 300, "limit=0", "limit=101", "limit=ten"],
)
def test_a_bad_cursor_or_limit_is_422_naming_it(owner_api, query):
    response = owner_api.get(f"/schedules?{query}")

    assert response.status_code == 422
    assert query.split("=")[0] in error_of(response)["fields"]


def test_the_list_costs_a_fixed_number_of_queries(owner, django_assert_max_num_queries):
    agents = [make_agent() for _ in range(3)]
    for n in range(12):
        schedule = make_schedule(owner, agents[n % 3], title=f"S{n}")
        if n % 2:
            fail(materialize(schedule))
        if n % 3 == 0:
            services.pause_schedule(schedule, by=owner)
    api = Api(token_for(owner, "read"))

    # token lookup, last_used_at, the one list query (with its joins)
    with django_assert_max_num_queries(4):
        response = api.get("/schedules?limit=50")
    assert len(response.json()["items"]) == 12
    with django_assert_max_num_queries(4):
        api.get("/schedules?status=paused&limit=5")


@pytest.mark.parametrize(
    "values",
    [
        ["9999-12-31T23:59:59-14:00", 1],
        ["2026-09-03T09:00:00", 1],
        [1, 1],
        ["x", 1],
        ["2026-09-03T09:00:00+00:00", -1],
    ],
)
def test_a_forged_cursor_is_422(owner_api, values):
    cursor = base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")

    response = owner_api.get(f"/schedules?cursor={cursor}")

    assert response.status_code == 422
    assert "cursor" in error_of(response)["fields"]
