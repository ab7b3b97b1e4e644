"""Bearer tokens: 401 without a valid one, 403 without the scope, and a token acts as its user."""

from __future__ import annotations

import pytest
from django.test import Client

from schedules import tokens
from schedules.models import ApiToken, ScheduleRevision
from tests.api.conftest import ALL_SCOPES, ROUTES, Api, body_of, error_of, token_for

pytestmark = pytest.mark.django_db

ROUTE_IDS = [f"{method} {path}" for method, path, _, _ in ROUTES]


@pytest.mark.parametrize(("method", "template", "scope", "body"), ROUTES, ids=ROUTE_IDS)
def test_every_route_answers_401_without_a_token(world, anonymous_api, method, template, scope, body):
    response = anonymous_api.request(method, world.path(template), body_of(body))

    assert response.status_code == 401
    assert error_of(response)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "template", "scope", "body"), ROUTES, ids=ROUTE_IDS)
def test_every_route_answers_401_with_an_unknown_token(world, method, template, scope, body):
    response = Api("sat_not-a-real-token").request(method, world.path(template), body_of(body))

    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


@pytest.mark.parametrize(("method", "template", "scope", "body"), ROUTES, ids=ROUTE_IDS)
def test_every_route_answers_401_with_a_revoked_token(world, owner, method, template, scope, body):
    secret = token_for(owner, *ALL_SCOPES)
    tokens.revoke_api_token(ApiToken.objects.get(token_hash=tokens.hash_secret(secret)))

    response = Api(secret).request(method, world.path(template), body_of(body))

    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


@pytest.mark.parametrize(("method", "template", "scope", "body"), ROUTES, ids=ROUTE_IDS)
def test_every_route_answers_403_without_its_scope(world, owner, method, template, scope, body):
    others = [s for s in ALL_SCOPES if s != scope]
    response = Api(token_for(owner, *others)).request(method, world.path(template), body_of(body))

    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "missing_scope"
    assert scope in error["message"]


def test_a_header_that_is_not_bearer_is_refused(world):
    client = Client()
    for value in ("Basic b2xnYTpwdw==", "Bearer", "Bearer    ", "sat_only-the-token"):
        response = client.get("/api/v1/schedules", HTTP_AUTHORIZATION=value)
        assert response.status_code == 401, value
        assert response.json()["error"]["code"] in {"invalid_token", "not_authenticated"}


def test_a_deactivated_users_token_is_refused(owner, owner_api):
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    response = owner_api.get("/schedules")

    assert response.status_code == 401


def test_a_token_records_when_it_was_last_used(owner):
    secret = token_for(owner, "read")
    token = ApiToken.objects.get(token_hash=tokens.hash_secret(secret))
    assert token.last_used_at is None

    Api(secret).get("/budget")

    token.refresh_from_db()
    assert token.last_used_at is not None


def test_pinning_with_the_scope_but_without_the_pin_permission_is_403(world, owner):
    response = Api(token_for(owner, "pin_revision")).post(
        f"/schedules/{world.schedule.pk}/revisions", body_of("pin")
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert ScheduleRevision.objects.filter(schedule=world.schedule).count() == 1


def test_a_token_acts_as_its_user_so_another_owners_schedule_is_404(world, other_api):
    response = other_api.get(f"/schedules/{world.schedule.pk}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_bearer_requests_need_no_csrf_token(owner, agent):
    client = Client(enforce_csrf_checks=True)
    secret = token_for(owner, "write")
    response = client.post(
        "/api/v1/schedules",
        {"title": "Digest", "prompt": "Summarise.", "agent": agent.name, "cron": "0 7 * * *"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert response.status_code == 422  # got past CSRF: timezone is required with cron
    assert "timezone" in response.json()["error"]["fields"]
