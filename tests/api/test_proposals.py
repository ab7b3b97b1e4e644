"""Proposals through the API (docs/contract.md#confirm-before-chat-creates-a-schedule): listed with
their conversation, confirmed (201, then 200 with the same schedule, exactly one 201 however many
race) or declined; every answer, errors included, checked against the served OpenAPI schema."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from runs.conversations import execute_message
from schedules.api.representations import Schedule as ScheduleOut
from schedules.models import Proposal, Schedule
from tests.api.conftest import Api, error_of, token_for
from tests.concurrency import race
from tests.factories import make_assistant, make_schedule

pytestmark = pytest.mark.django_db

THURSDAY_MORNING = datetime.fromisoformat("2026-09-03T06:00:00+00:00")  # 09:00 in Riga


def _proposed(api: Api) -> tuple[int, int]:
    """The owner asks the assistant for a weekday briefing; a worker answers. (conversation, proposal)"""
    make_assistant()
    started = api.post(
        "/conversations", {"agent": "sim-assistant", "message": "every weekday at 7:30 brief me on AI news"}
    )
    assert started.status_code == 201
    execute_message(started.json()["run"]["id"], sleep=lambda seconds: None)
    conversation_id = started.json()["conversation"]["id"]
    return conversation_id, Proposal.objects.get(conversation_id=conversation_id).pk


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_the_conversation_lists_its_proposal_with_what_would_be_created(owner_api):
    conversation_id, proposal_id = _proposed(owner_api)

    detail = owner_api.get(f"/conversations/{conversation_id}").json()

    assert detail["schedules"] == []
    (proposal,) = detail["proposals"]
    assert proposal == {
        "id": proposal_id,
        "status": "open",
        "title": "AI news briefing",
        "prompt": proposal["prompt"],
        "cron": "30 7 * * 1-5",
        "timezone": "Europe/Riga",
        "run_at": None,
        "next_fires": ["2026-09-04T07:30:00+03:00", "2026-09-07T07:30:00+03:00", "2026-09-08T07:30:00+03:00"],
        "agent": "sim-assistant",
        "model": "sim-assistant",
        "limits": proposal["limits"],
        "max_consecutive_failures": 2,
        "monthly_cap": None,
        "forecast": {
            "expected": "95.00",
            "worst": "95.00",
            "runs": {"due": 19, "run": 19, "refused": 0, "skipped": 0},
            "month": proposal["forecast"]["month"],
        },
        "expires_at": "2026-09-04T06:00:00+00:00",
        "schedule_id": None,
    }
    month = proposal["forecast"]["month"]  # the conversation's own run is spent already
    assert Decimal(month["expected_with"]) == Decimal(month["worst_with"]) == Decimal(month["expected"]) + 95
    assert (month["ceiling_reached_on"], month["ceiling_reached_on_with"]) == (None, None)
    assert (month["stopped"], month["stopped_with"]) == (0, 0)
    limits = proposal["limits"]
    assert (limits["max_cost"], limits["synthesis_reserve_cost"], limits["synthesis_reserve_steps"]) == (
        "5.00",
        "1.00",
        2,
    )


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_confirm_answers_201_with_the_schedule_then_200_with_the_same(owner_api):
    conversation_id, proposal_id = _proposed(owner_api)

    created = owner_api.post(f"/proposals/{proposal_id}/confirm")
    again = owner_api.post(f"/proposals/{proposal_id}/confirm")

    assert (created.status_code, again.status_code) == (201, 200)
    schedule = created.json()
    assert set(schedule) == set(ScheduleOut.model_fields) and again.json() == schedule  # as POST /schedules
    assert (schedule["title"], schedule["cron"], schedule["status"]) == (
        "AI news briefing",
        "30 7 * * 1-5",
        "active",
    )
    revision = schedule["revision"]
    assert (revision["path"], revision["via"], revision["conversation_id"]) == (
        "schedule.create",
        "chat",
        conversation_id,
    )
    detail = owner_api.get(f"/schedules/{schedule['id']}").json()
    assert {key: detail[key] for key in schedule} == schedule
    assert Schedule.objects.count() == 1
    (listed,) = owner_api.get(f"/conversations/{conversation_id}").json()["proposals"]
    assert (listed["status"], listed["schedule_id"]) == ("confirmed", schedule["id"])


@pytest.mark.django_db(transaction=True)
def test_twenty_confirmations_racing_get_exactly_one_201(owner):
    secret = token_for(owner, "read", "write")
    _, proposal_id = _proposed(Api(secret))

    responses = race([lambda: Api(secret).post(f"/proposals/{proposal_id}/confirm")] * 20)

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * 19 + [201], responses
    assert len({response.json()["id"] for response in responses}) == 1
    assert Schedule.objects.count() == 1


def test_a_declined_proposal_answers_409_proposal_declined(owner_api):
    _, proposal_id = _proposed(owner_api)

    declined = owner_api.post(f"/proposals/{proposal_id}/decline")
    again = owner_api.post(f"/proposals/{proposal_id}/decline")
    refused = owner_api.post(f"/proposals/{proposal_id}/confirm")

    assert (declined.status_code, again.status_code) == (200, 200)
    assert declined.json()["status"] == "declined" and declined.json()["schedule_id"] is None
    assert refused.status_code == 409 and error_of(refused)["code"] == "proposal_declined"
    assert error_of(refused)["fields"] == {}
    assert not Schedule.objects.exists()


def test_declining_a_confirmed_proposal_answers_409_proposal_confirmed(owner_api):
    _, proposal_id = _proposed(owner_api)
    owner_api.post(f"/proposals/{proposal_id}/confirm")

    refused = owner_api.post(f"/proposals/{proposal_id}/decline")

    assert refused.status_code == 409 and error_of(refused)["code"] == "proposal_confirmed"
    assert Schedule.objects.count() == 1


def test_24_hours_later_both_answer_410_proposal_expired(owner_api):
    with time_machine.travel(THURSDAY_MORNING, tick=False):
        conversation_id, proposal_id = _proposed(owner_api)
    with time_machine.travel(THURSDAY_MORNING + timedelta(hours=24), tick=False):
        (listed,) = owner_api.get(f"/conversations/{conversation_id}").json()["proposals"]
        confirm = owner_api.post(f"/proposals/{proposal_id}/confirm")
        decline = owner_api.post(f"/proposals/{proposal_id}/decline")

    assert listed["status"] == "expired"
    assert (confirm.status_code, error_of(confirm)["code"]) == (410, "proposal_expired")
    assert (decline.status_code, error_of(decline)["code"]) == (410, "proposal_expired")
    assert not Schedule.objects.exists()


def test_a_proposal_that_no_longer_fits_answers_409_and_stays_open(owner, owner_api, settings):
    _, proposal_id = _proposed(owner_api)
    settings.MAX_ACTIVE_SCHEDULES = 1
    make_schedule(owner, make_assistant("writer"))

    refused = owner_api.post(f"/proposals/{proposal_id}/confirm")

    assert refused.status_code == 409 and error_of(refused)["code"] == "schedule_limit"
    assert Proposal.objects.get(pk=proposal_id).status == "open"


def test_another_owners_proposal_is_not_found(owner_api, other_api):
    _, proposal_id = _proposed(owner_api)

    for action in ("confirm", "decline"):
        response = other_api.post(f"/proposals/{proposal_id}/{action}")
        assert response.status_code == 404 and error_of(response)["code"] == "not_found"
    assert Proposal.objects.get(pk=proposal_id).status == "open"


@pytest.mark.parametrize("hostile", ["0", str(2**63), "9" * 40, "abc", "-1", "1.5", "%00", "1e3"])
@pytest.mark.parametrize("action", ["confirm", "decline"])
def test_hostile_ids_are_404_in_the_error_shape(owner_api, hostile, action):
    response = owner_api.post(f"/proposals/{hostile}/{action}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_a_token_without_write_is_403(owner, owner_api):
    _, proposal_id = _proposed(owner_api)
    reader = Api(token_for(owner, "read"))

    for action in ("confirm", "decline"):
        response = reader.post(f"/proposals/{proposal_id}/{action}")
        assert response.status_code == 403 and error_of(response)["code"] == "missing_scope"
    assert Proposal.objects.get(pk=proposal_id).status == "open"


def test_get_on_a_proposal_route_is_405_in_the_error_shape(owner_api):
    _, proposal_id = _proposed(owner_api)
    response = owner_api.client.get(
        f"/api/v1/proposals/{proposal_id}/confirm", HTTP_AUTHORIZATION=f"Bearer {owner_api.secret}"
    )
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"


def test_yes_as_a_message_confirms_the_open_proposal(owner_api):
    conversation_id, proposal_id = _proposed(owner_api)

    sent = owner_api.post(f"/conversations/{conversation_id}/messages", {"message": "Yes!"})

    assert sent.status_code == 202
    proposal = Proposal.objects.get(pk=proposal_id)
    assert proposal.status == "confirmed" and proposal.schedule_id is not None
    execute_message(sent.json()["id"], sleep=lambda seconds: None)
    last = owner_api.get(f"/conversations/{conversation_id}").json()["runs"][-1]
    assert last["answer"] == "Done — it is on your schedules."


def test_a_yes_that_cannot_confirm_is_409_and_nothing_is_sent(owner, owner_api, settings):
    conversation_id, proposal_id = _proposed(owner_api)
    settings.MAX_ACTIVE_SCHEDULES = 1
    make_schedule(owner, make_assistant("writer"))

    refused = owner_api.post(f"/conversations/{conversation_id}/messages", {"message": "yes"})

    assert refused.status_code == 409 and error_of(refused)["code"] == "schedule_limit"
    assert len(owner_api.get(f"/conversations/{conversation_id}").json()["runs"]) == 1
    assert Proposal.objects.get(pk=proposal_id).status == "open"
