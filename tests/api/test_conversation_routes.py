"""The conversation routes (docs/contract.md#json-api and #conversations): start, send, read, list,
cancel; every refusal in the API's error shape, and nothing half-written."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django_q.models import OrmQ

from accounting.models import OwnerBudget, Reservation
from runs.conversations import execute_message
from runs.models import Conversation, Run
from tests.api.conftest import error_of
from tests.factories import (
    answered_conversation,
    fail,
    make_assistant,
    make_schedule,
    materialize,
    running_run,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def assistant(db):
    return make_assistant()


def test_starting_a_conversation_answers_201_with_it_and_its_queued_run(owner, owner_api, assistant):
    response = owner_api.post("/conversations", {"agent": "sim-assistant", "message": "hello there"})

    assert response.status_code == 201
    body = response.json()
    conversation = Conversation.objects.get(owner=owner)
    assert body["conversation"] == {
        "id": conversation.pk,
        "title": "hello there",
        "agent": "sim-assistant",
        "schedule_id": None,
        "created_at": conversation.created_at.isoformat(),
        "last_activity_at": conversation.last_activity_at.isoformat(),
        "run_in_progress": True,
    }
    run = body["run"]
    assert (run["status"], run["kind"], run["prompt"], run["conversation_id"]) == (
        "queued",
        "interactive",
        "hello there",
        conversation.pk,
    )
    assert run["limits"]["synthesis_reserve_steps"] == 1
    assert run["history"] == {"exchanges": 0, "older_omitted": False}  # chosen when it was queued
    assert OrmQ.objects.get().task["args"] == (run["id"],)
    assert Reservation.objects.filter(run_id=run["id"], released_at__isnull=True).exists()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"agent": "sim-assistant", "message": ""}, "message", "must not be empty"),
        ({"agent": "sim-assistant", "message": "x" * 8001}, "message", "at most 8,000 characters"),
        ({"agent": "nobody", "message": "hi"}, "agent", "no active agent named 'nobody'"),
        ({"agent": "sim-assistant"}, "message", "message is required"),
        ({"agent": "sim-assistant", "message": "hi", "max_cost": "50"}, "max_cost", "not a recognised field"),
        ({"agent": "sim-assistant", "message": 7}, "message", "message"),
    ],
    ids=["empty", "oversized", "unknown agent", "no message", "a limit", "not text"],
)
def test_a_bad_body_is_422_naming_the_field_and_nothing_is_written(owner_api, assistant, body, field, words):
    response = owner_api.post("/conversations", body)

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_body" and field in error["fields"] and words in error["fields"][field]
    assert not Conversation.objects.exists() and not Run.objects.exists()


def test_a_refused_admission_is_409_with_the_figures_and_nothing_is_written(owner, owner_api, assistant):
    OwnerBudget.objects.filter(owner_id=owner.pk).update(monthly_ceiling=Decimal("4.00"))

    response = owner_api.post("/conversations", {"agent": "sim-assistant", "message": "hello"})

    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "admission_denied"
    assert "the monthly ceiling of USD 4.00 would be exceeded" in error["message"]
    assert (
        not Conversation.objects.exists() and not Reservation.objects.exists() and not OrmQ.objects.exists()
    )


def test_a_message_answers_202_and_a_second_one_while_it_runs_is_409(owner, owner_api, assistant):
    conversation = answered_conversation(owner, assistant)

    first = owner_api.post(f"/conversations/{conversation.pk}/messages", {"message": "and then?"})
    second = owner_api.post(f"/conversations/{conversation.pk}/messages", {"message": "hello?"})

    assert first.status_code == 202 and first.json()["status"] == "queued"
    assert second.status_code == 409 and error_of(second)["code"] == "run_in_progress"
    assert conversation.runs.count() == 2


def test_a_scheduled_runs_conversation_takes_no_message(owner, owner_api, agent):
    run = fail(materialize(make_schedule(owner, agent)))

    response = owner_api.post(f"/conversations/{run.conversation_id}/messages", {"message": "why?"})

    assert response.status_code == 409 and error_of(response)["code"] == "scheduled_conversation"


def test_a_message_to_a_deleted_or_anothers_conversation_is_404(owner, owner_api, other_api, assistant):
    conversation = answered_conversation(owner, assistant)
    assert other_api.post(f"/conversations/{conversation.pk}/messages", {"message": "hi"}).status_code == 404
    assert other_api.get(f"/conversations/{conversation.pk}").status_code == 404

    assert owner_api.delete(f"/conversations/{conversation.pk}").status_code == 204
    assert owner_api.post(f"/conversations/{conversation.pk}/messages", {"message": "hi"}).status_code == 404
    assert owner_api.get(f"/conversations/{conversation.pk}").status_code == 404


def test_the_list_is_newest_activity_first_and_paged(owner, owner_api, assistant):
    older = answered_conversation(owner, assistant, "older")
    newer = answered_conversation(owner, assistant, "newer")
    owner_api.post(f"/conversations/{older.pk}/messages", {"message": "bump"})

    first = owner_api.get("/conversations?limit=1").json()
    second = owner_api.get(first["next"]).json()

    assert [c["id"] for c in first["items"]] == [older.pk]
    assert first["items"][0]["run_in_progress"] is True
    assert [c["id"] for c in second["items"]] == [newer.pk] and second["next"] is None


def test_cancel_ends_the_run_cancelled_and_the_repeat_is_409(owner, owner_api, other_api, assistant):
    run = running_run(owner, assistant)

    assert other_api.post(f"/runs/{run.pk}/cancel").status_code == 404
    cancelled = owner_api.post(f"/runs/{run.pk}/cancel")
    again = owner_api.post(f"/runs/{run.pk}/cancel")

    assert cancelled.status_code == 200
    assert (cancelled.json()["status"], cancelled.json()["failure"]) == ("cancelled", None)
    assert again.status_code == 409 and error_of(again)["code"] == "not_running"
    assert "already ended (cancelled)" in error_of(again)["message"]


def test_the_conversation_shows_messages_tool_calls_with_results_and_runs(owner, owner_api, assistant):
    created = owner_api.post(
        "/conversations", {"agent": "sim-assistant", "message": "what time is it?"}
    ).json()
    execute_message(created["run"]["id"])

    body = owner_api.get(f"/conversations/{created['conversation']['id']}").json()

    (run,) = body["runs"]
    assert run["status"] == "completed" and run["usage"]["tool_calls"] == 1
    assert run["history"] == {"exchanges": 0, "older_omitted": False}
    roles = [(m["role"], m["tool_name"]) for m in body["messages"]]
    assert roles == [("user", None), ("assistant", None), ("tool", "clock_now"), ("assistant", None)]
    call = body["messages"][1]["tool_calls"][0]
    assert call["name"] == "clock_now" and body["messages"][2]["tool_call_id"] == call["id"]
    assert body["messages"][-1]["content"] == run["answer"]
    assert body["schedules"] == [] and body["earlier_runs"] is False and body["run_in_progress"] is False
