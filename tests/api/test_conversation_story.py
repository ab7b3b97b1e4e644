"""The issue's story through the API: the owner asks for a weekday briefing, the assistant creates it
through the real run loop with the docs/decisions/0002 policy pinned, the revision says it came from chat
and names the conversation; then a USD 20 budget is asked for and refused."""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine

from runs.conversations import execute_message
from schedules.models import Schedule
from tests.factories import chat_creates_at_once, make_assistant

pytestmark = pytest.mark.django_db


@time_machine.travel(datetime.fromisoformat("2026-09-03T06:00:00+00:00"), tick=False)
def test_a_schedule_created_in_chat_through_the_api_and_a_budget_change_refused(owner, owner_api):
    make_assistant()
    chat_creates_at_once(owner)  # confirming first is tests/api/test_proposals.py

    started = owner_api.post(
        "/conversations", {"agent": "sim-assistant", "message": "every weekday at 7:30 brief me on AI news"}
    )
    assert started.status_code == 201
    conversation_id, run_id = started.json()["conversation"]["id"], started.json()["run"]["id"]
    assert owner_api.get(f"/runs/{run_id}").json()["status"] == "queued"  # nothing waited on the provider

    assert execute_message(run_id).status == "completed"  # what a worker does

    detail = owner_api.get(f"/conversations/{conversation_id}").json()
    (made,) = detail["schedules"]
    assert (made["path"], made["revision"], made["run_id"]) == ("schedule.create", 1, run_id)
    assert made["cadence"] == "Weekdays at 07:30, Europe/Riga"
    assert made["max_consecutive_failures"] == 2
    limits = made["limits"]
    assert limits["max_cost"] == "5.00"
    assert (limits["synthesis_reserve_steps"], limits["synthesis_reserve_model_calls"]) == (2, 2)
    assert limits["synthesis_reserve_cost"] == "1.00"
    tools = [m["tool_name"] for m in detail["messages"] if m["role"] == "tool"]
    assert tools == ["clock_now", "schedule_create"]
    answer = detail["runs"][0]["answer"]
    assert answer.startswith(f"Done: I created schedule {made['schedule_id']} “AI news briefing”")
    assert "budget USD 5.00 per run" in answer and "pauses after 2 consecutive failures" in answer

    schedule_id = made["schedule_id"]
    (revision,) = owner_api.get(f"/schedules/{schedule_id}/revisions").json()["items"]
    assert (revision["path"], revision["via"], revision["conversation_id"]) == (
        "schedule.create",
        "chat",
        conversation_id,
    )

    asked = owner_api.post(
        f"/conversations/{conversation_id}/messages",
        {"message": f"give schedule {schedule_id} a USD 20 budget"},
    )
    assert asked.status_code == 202
    execute_message(asked.json()["id"])

    detail = owner_api.get(f"/conversations/{conversation_id}").json()
    refusal = [m for m in detail["messages"] if m["run_id"] == asked.json()["id"] and m["role"] == "tool"]
    assert refusal[0]["tool_name"] == "schedule_update" and refusal[0]["is_error"] is True
    assert "max_cost cannot be changed by schedule.update" in refusal[0]["content"]
    last = detail["runs"][-1]
    assert last["status"] == "completed" and last["history"] == {"exchanges": 1, "older_omitted": False}
    assert f"I cannot give schedule {schedule_id} a USD 20.00 budget" in last["answer"]
    assert "pin an explicit revision" in last["answer"]
    assert Schedule.objects.get(pk=schedule_id).revision.number == 1
    assert owner_api.get(f"/schedules/{schedule_id}").json()["revision"]["limits"]["max_cost"] == "5.00"
