"""Every error is JSON in one shape, including the ones ninja and Django would answer themselves."""

from __future__ import annotations

import pytest
from django.test import Client

from schedules import services
from tests.api.conftest import error_of
from tests.factories import make_schedule

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/api/v1/", "/api/v1/nope", "/api/v1/schedules/", "/api/v1/schedules/1/x"])
def test_an_unknown_route_is_a_json_404(owner_api, path):
    response = owner_api.get(path)

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/schedules", "POST, GET"),
        ("DELETE", "/budget", "GET"),
        ("POST", "/runs/1", "GET"),
        ("PATCH", "/conversations/1", "GET, DELETE"),
        ("GET", "/runs/1/cancel", "POST"),
    ],
)
def test_an_unsupported_method_is_a_json_405_with_allow(owner_api, method, path, allowed):
    response = owner_api.request(method, path)

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert set(response["Allow"].split(", ")) == set(allowed.split(", "))


def test_a_body_over_the_size_cap_is_413_on_create(agent, owner_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024

    response = owner_api.post(
        "/schedules",
        {"title": "Big", "prompt": "p" * 2000, "agent": agent.name, "cron": "0 9 * * *", "timezone": "UTC"},
    )

    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "body_too_large"
    assert "1024" in error["message"]


def test_an_unexpected_fault_is_a_json_500_and_is_logged(owner, agent, owner_api, monkeypatch, caplog):
    schedule = make_schedule(owner, agent)

    def broken(*args, **kwargs):
        raise RuntimeError("database fell over")

    monkeypatch.setattr(services, "pause_schedule", broken)

    response = owner_api.post(f"/schedules/{schedule.pk}/pause")

    assert response.status_code == 500
    error = error_of(response)
    assert error["code"] == "internal_error"
    assert "database fell over" not in error["message"]
    assert "database fell over" in caplog.text


def test_every_error_has_code_message_and_fields(owner_api):
    client = Client()
    responses = [
        client.get("/api/v1/schedules"),
        client.get("/api/v1/schedules", HTTP_AUTHORIZATION="Bearer nope"),
        owner_api.get("/schedules?limit=0"),
        owner_api.get("/schedules/999999"),
        owner_api.post("/schedules", raw="{"),
    ]
    for response in responses:
        assert response["Content-Type"].startswith("application/json")
        error = response.json()["error"]
        assert set(error) == {"code", "message", "fields"}
        assert error["code"].replace("_", "").isalpha() and error["code"].islower()
        assert error["message"]
        assert isinstance(error["fields"], dict)
