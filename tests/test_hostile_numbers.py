"""Hostile digit strings through every numeric field of every form and query parameter: never a
500, never read as a number. `int()` reads Arabic-Indic and fullwidth digits as numbers,
`str.isdigit()` says yes to superscript and circled digits (which `int()` then refuses with an
exception), and Python refuses to read numbers of more than 4,300 digits: each of those once
answered 500 or was stored as a number. The same table goes through the API, which already
refused them all."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounting.models import OwnerBudget
from accounting.numbers import signed_whole_number, whole_number
from config.middleware import MAX_URL_BYTES
from schedules.models import RevisionRequest, ScheduleRevision
from tests.api.conftest import Api, token_for
from tests.factories import answered_conversation, limits, make_agent, make_schedule

pytestmark = pytest.mark.django_db

HOSTILE_DIGITS = [
    "\u0665",  # Arabic-Indic five: int() reads 5
    "\uff13",  # fullwidth three: int() reads 3
    "\u00b2",  # superscript two: isdigit() is True, int() raises
    "\u2460",  # circled one: isdigit() is True, int() raises
    "\U0001d7d3",  # mathematical bold five: int() reads 5
    "\u0967\u0966",  # Devanagari one zero
    "9" * 4301,  # past Python's int() limit for text
    "9" * 30,  # past a bigint
    "5_0",
    "1e3",
    "0x10",
    "+5",
    "١٢",
]
# A form field strips surrounding whitespace as Django's text fields do ("5\n" typed is 5); a
# JSON string is taken as written.
API_ONLY = ["5\n", " 5"]
LIMIT_FIELDS = [
    "max_steps",
    "max_model_calls",
    "max_tool_calls",
    "synthesis_reserve_steps",
    "synthesis_reserve_model_calls",
    "synthesis_reserve_tool_calls",
    "max_consecutive_failures",
]
VALID_LIMITS = {
    "max_steps": "12",
    "max_model_calls": "12",
    "max_tool_calls": "8",
    "max_cost": "5.00",
    "synthesis_reserve_steps": "2",
    "synthesis_reserve_model_calls": "2",
    "synthesis_reserve_tool_calls": "0",
    "synthesis_reserve_cost": "1.00",
    "max_consecutive_failures": "2",
}


@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_the_one_reader_refuses_them_all(text):
    assert whole_number(text) is None and signed_whole_number(text) is None


@pytest.mark.parametrize(("text", "number"), [("0", 0), ("42", 42), (" 7 ", 7), ("9" * 18, 10**18 - 1)])
def test_and_reads_plain_ascii_numbers(text, number):
    assert whole_number(text) == number


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


@pytest.fixture
def schedule(owner, agent):
    return make_schedule(owner, agent)


@pytest.mark.parametrize("field", LIMIT_FIELDS)
@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_the_owners_request_form_and_its_live_check_refuse_them(owner_client, schedule, field, text):
    url = f"/schedules/{schedule.pk}/request-limits/"
    body = {**VALID_LIMITS, field: text, "reason": "Runs need more room."}
    sent = owner_client.post(url, body)
    checked = owner_client.post(url, {**body, "check": "1"}, headers={"HX-Request": "true"})
    assert sent.status_code == 200 and checked.status_code == 200  # the form again, with its error
    assert not RevisionRequest.objects.exists()
    assert "must be" in sent.text


@pytest.mark.parametrize("field", [*LIMIT_FIELDS, "base_revision", "request"])
@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_the_admin_pin_form_refuses_them(admin_client, schedule, field, text):
    body = {**VALID_LIMITS, "reason": "More room", "base_revision": "1", field: text}
    response = admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", body)
    assert response.status_code in (200, 404)  # the form with its error, or no such request
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_query_parameters_that_name_a_number_refuse_them(owner_client, admin_client, owner, schedule, text):
    # A value past Python's int() limit makes an address longer than any server of the product
    # serves: refused before any view (config.middleware), as gunicorn does in production.
    served = len(text.encode()) < MAX_URL_BYTES - 100
    conversation = answered_conversation(owner, make_agent("chatty"))
    page = owner_client.get(f"/conversations/{conversation.pk}/", {"before": text})
    assert page.status_code == (200 if served else 414)
    assert owner_client.get("/", {"start": text}).status_code == (200 if served else 414)
    pin = admin_client.get(f"/admin/schedules/schedule/{schedule.pk}/pin/", {"request": text})
    assert pin.status_code == (404 if served else 414)  # names no request


@pytest.mark.parametrize("field", ["history_turns", "history_tokens"])
@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_the_admin_agent_form_refuses_them(admin_client, agent, field, text):
    body = {
        "name": agent.name,
        "provider": agent.provider,
        "model": agent.model,
        "tools": "[]",
        "price_input": "3.00",
        "price_output": "15.00",
        "default_limits": limits().model_dump_json(),
        "history_turns": "20",
        "history_tokens": "12000",
        "is_active": "on",
        "credential_changes-TOTAL_FORMS": "0",
        "credential_changes-INITIAL_FORMS": "0",
        field: text,
    }
    response = admin_client.post(f"/admin/runs/agent/{agent.pk}/change/", body)
    assert response.status_code == 200 and "Enter a whole number" in response.text
    agent.refresh_from_db()
    assert (agent.history_turns, agent.history_tokens) == (20, 12_000)


@pytest.mark.parametrize("field", ["max_active_schedules", "chat_min_interval_minutes"])
@pytest.mark.parametrize("text", HOSTILE_DIGITS)
def test_the_admin_owner_caps_refuse_them(admin_client, owner, field, text):
    budget = OwnerBudget.objects.get(owner=owner)
    body = {"owner": owner.pk, "timezone": budget.timezone, field: text}
    response = admin_client.post(f"/admin/accounting/ownerbudget/{budget.pk}/change/", body)
    assert response.status_code == 200 and "Enter a whole number" in response.text
    budget.refresh_from_db()
    assert getattr(budget, field) is None


@pytest.mark.parametrize("field", ["max_steps", "max_consecutive_failures"])
@pytest.mark.parametrize("text", [*HOSTILE_DIGITS, *API_ONLY])
def test_the_api_refuses_the_same_table(owner, schedule, field, text):
    api = Api(token_for(owner, "read", "write"))
    money = ("max_cost", "synthesis_reserve_cost")
    limits_body: dict[str, Any] = {k: (v if k in money else int(v)) for k, v in VALID_LIMITS.items()}
    body: dict[str, Any] = {
        "limits": {k: v for k, v in limits_body.items() if k != "max_consecutive_failures"},
        "max_consecutive_failures": 2,
        "reason": "More room",
    }
    if field == "max_consecutive_failures":
        body[field] = text
    else:
        body["limits"][field] = text
    response = api.post(f"/schedules/{schedule.pk}/revision-requests", body)
    assert response.status_code == 422 and not RevisionRequest.objects.exists()


def test_the_crawler_checks_these_fields_too():
    from tests.test_crawler import QUERY_NAMES

    assert {*LIMIT_FIELDS, "history_turns", "max_active_schedules", "before", "start", "request"} <= set(
        QUERY_NAMES
    )


def test_a_plain_number_still_saves_everywhere(admin_client, owner_client, schedule, owner):
    body = {**VALID_LIMITS, "reason": "Runs need more room."}
    assert owner_client.post(f"/schedules/{schedule.pk}/request-limits/", body).status_code == 302
    assert RevisionRequest.objects.get().limits["max_steps"] == 12
    budget = OwnerBudget.objects.get(owner=owner)
    response = admin_client.post(
        f"/admin/accounting/ownerbudget/{budget.pk}/change/",
        {"owner": owner.pk, "timezone": budget.timezone, "max_active_schedules": "7"},
    )
    assert response.status_code == 302
    budget.refresh_from_db()
    assert budget.max_active_schedules == 7
