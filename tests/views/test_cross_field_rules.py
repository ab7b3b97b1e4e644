"""The pages that take limits refuse what the API refuses (tests/api/test_cross_field_rules.py): every
cross-field rule of the model each page parses with, one field at a time, is a field error on the
page naming that field, never a 500, and nothing is written. The admin's pin page, the same page
deciding an owner's request, and the owner's request for new limits."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from schedules import services
from schedules.models import RevisionRequest, Schedule
from schedules.schemas import ExplicitRevision, RevisionRequestBody, parse_revision_request
from tests.api.conftest import valid_ask_body, valid_pin_body
from tests.cross_field_rules import Variant, as_form, model_variants, row_counts
from tests.factories import make_schedule

pytestmark = pytest.mark.django_db

PIN_CASES = [
    pytest.param(variant, id=f"{variant.moved} ({variant.rule})")
    for variant in model_variants(ExplicitRevision, valid_pin_body())
]
ASK_CASES = [
    pytest.param(variant, id=f"{variant.moved} ({variant.rule})")
    for variant in model_variants(RevisionRequestBody, valid_ask_body())
]


@pytest.fixture
def schedule(owner, agent) -> Schedule:
    return make_schedule(owner, agent, title="Morning briefing")


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def _refused_on_the_page(client: Client, url: str, data: dict[str, str], variant: Variant) -> None:
    before = row_counts()
    response = client.post(url, data)
    assert response.status_code == 200, response.status_code
    errors = response.context["form"].errors
    named = {name.removeprefix("limits.") for name in variant.names}
    assert named & set(errors), (variant, errors.as_data())
    assert row_counts() == before


def test_the_sweeps_cover_the_reserves_and_the_cap():
    for cases in (PIN_CASES, ASK_CASES):
        rules = {case.values[0].rule for case in cases}
        assert "monthly_cap at least limits.max_cost" in rules
        assert "synthesis_reserve_cost below max_cost" in rules


@pytest.mark.parametrize("variant", PIN_CASES)
def test_the_admin_pin_page_names_the_field(admin_client, schedule, variant: Variant):
    data: dict[str, Any] = {**as_form(variant.body), "base_revision": "1"}
    _refused_on_the_page(admin_client, f"/admin/schedules/schedule/{schedule.pk}/pin/", data, variant)


@pytest.mark.parametrize("variant", PIN_CASES)
def test_deciding_a_request_on_the_pin_page_names_the_field(admin_client, schedule, variant: Variant):
    asked = services.request_revision(
        schedule, parse_revision_request(valid_ask_body()), by=schedule.owner, via="test"
    )
    url = f"/admin/schedules/schedule/{schedule.pk}/pin/?request={asked.pk}"
    data = {**as_form(variant.body), "base_revision": "1", "request": str(asked.pk)}
    _refused_on_the_page(admin_client, url, data, variant)
    asked.refresh_from_db()
    assert asked.state == RevisionRequest.State.OPEN


@pytest.mark.parametrize("variant", ASK_CASES)
def test_the_owners_request_for_new_limits_names_the_field(owner_client, schedule, variant: Variant):
    _refused_on_the_page(
        owner_client, f"/schedules/{schedule.pk}/request-limits/", as_form(variant.body), variant
    )


def test_the_issue_s_pin_with_a_cap_below_its_cost_is_refused_in_the_admin_decision(admin_client, schedule):
    asked = services.request_revision(
        schedule, parse_revision_request(valid_ask_body()), by=schedule.owner, via="test"
    )
    body = {**valid_pin_body(), "monthly_cap": "1.00"}
    body["limits"] = {**body["limits"], "max_cost": "6.00"}
    url = f"/admin/schedules/schedule/{schedule.pk}/pin/?request={asked.pk}"
    response = admin_client.post(url, {**as_form(body), "base_revision": "1", "request": str(asked.pk)})
    assert response.status_code == 200
    assert response.context["form"].errors["monthly_cap"] == [
        "monthly_cap: USD 1.00 is below the cost limit of one run (USD 6.00), so it could never admit a run"
    ]
