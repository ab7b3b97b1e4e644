"""The OpenAPI schema at /api/v1/openapi.json and the docs page at /api/v1/docs (no CDN)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db

SPEC_ROUTES = {
    ("get", "/api/v1/schedules"): "read",
    ("post", "/api/v1/schedules"): "write",
    ("get", "/api/v1/schedules/{schedule_id}"): "read",
    ("patch", "/api/v1/schedules/{schedule_id}"): "write",
    ("post", "/api/v1/schedules/{schedule_id}/pause"): "write",
    ("post", "/api/v1/schedules/{schedule_id}/resume"): "write",
    ("get", "/api/v1/schedules/{schedule_id}/revisions"): "read",
    ("post", "/api/v1/schedules/{schedule_id}/revisions"): "pin_revision",
    ("get", "/api/v1/schedules/{schedule_id}/occurrences"): "read",
    ("get", "/api/v1/runs/{run_id}"): "read",
    ("get", "/api/v1/runs/in-flight"): "read",
    ("get", "/api/v1/accounting-events"): "read",
    ("get", "/api/v1/budget"): "read",
    ("delete", "/api/v1/conversations/{conversation_id}"): "write",
    ("get", "/api/v1/conversations"): "read",
    ("get", "/api/v1/conversations/{conversation_id}"): "read",
    ("post", "/api/v1/conversations"): "write",
    ("post", "/api/v1/conversations/{conversation_id}/messages"): "write",
    ("post", "/api/v1/runs/{run_id}/cancel"): "write",
    ("post", "/api/v1/schedules/{schedule_id}/revision-requests"): "write",
    ("get", "/api/v1/revision-requests"): "pin_revision",
    ("put", "/api/v1/budget/alerts"): "write",
    ("post", "/api/v1/revision-requests/{request_id}/decision"): "pin_revision",
    ("post", "/api/v1/proposals/{proposal_id}/confirm"): "write",
    ("post", "/api/v1/proposals/{proposal_id}/decline"): "write",
}


@pytest.fixture
def schema():
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_schema_documents_every_route_of_the_contract_and_no_other(schema):
    operations = {
        (method, path): details
        for path, methods in schema["paths"].items()
        for method, details in methods.items()
    }
    assert schema["openapi"].startswith("3.1")
    assert set(operations) == set(SPEC_ROUTES)
    for key, scope in SPEC_ROUTES.items():
        operation = operations[key]
        assert operation["x-required-scope"] == scope
        assert f"Scope: `{scope}`" in operation["description"]
        assert operation["security"] == [{"BearerToken": []}]
        for status in ("401", "403", "429"):
            assert status in operation["responses"], (key, status)


def test_bearer_auth_is_documented(schema):
    scheme = schema["components"]["securitySchemes"]["BearerToken"]
    assert scheme["type"] == "http"
    assert scheme["scheme"] == "bearer"
    assert "pin_revision" in scheme["description"]


def test_request_bodies_are_the_shared_models(schema):
    paths = schema["paths"]
    bodies = {
        ("post", "/api/v1/schedules"): "ScheduleCreate",
        ("patch", "/api/v1/schedules/{schedule_id}"): "ScheduleUpdate",
        ("post", "/api/v1/schedules/{schedule_id}/revisions"): "ExplicitRevision",
        ("post", "/api/v1/conversations"): "ConversationCreate",
        ("post", "/api/v1/conversations/{conversation_id}/messages"): "MessageCreate",
        ("post", "/api/v1/schedules/{schedule_id}/revision-requests"): "RevisionRequestBody",
        ("post", "/api/v1/revision-requests/{request_id}/decision"): "RequestDecision",
    }
    components = schema["components"]["schemas"]
    for (method, path), name in bodies.items():
        body = paths[path][method]["requestBody"]
        assert body["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
        assert components[name]["additionalProperties"] is False
    limits = components["RunLimits"]
    assert set(limits["required"]) == set(limits["properties"])
    money = limits["properties"]["max_cost"]["anyOf"]
    assert {"string", "integer"} == {option["type"] for option in money}
    assert "number" not in str(money)


def test_errors_money_and_the_deletion_are_documented(schema):
    components = schema["components"]["schemas"]
    assert set(components["ErrorDetail"]["required"]) == {"code", "message", "fields"}
    assert components["Limits"]["properties"]["max_cost"]["type"] == "string"
    deletion = schema["paths"]["/api/v1/conversations/{conversation_id}"]["delete"]["responses"]
    assert "204" in deletion and "content" not in deletion["204"]
    assert "409" in deletion


def test_the_docs_page_is_served_without_any_cdn():
    response = Client().get("/api/v1/docs")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-openapi-url="/api/v1/openapi.json"' in html
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls, html
    for url in urls:
        assert url.startswith("/"), f"{url} is not served by us"
        if url.startswith("/static/"):
            assert finders.find(url.removeprefix("/static/")), f"{url} is not a static file"
    assert "//" not in "".join(u for u in urls if not u.startswith("/api/"))


def test_the_docs_assets_make_no_outside_calls():
    text = Path(finders.find("api/swagger-ui-init.js")).read_text()
    assert "validatorUrl: null" in text
    assert "http" not in text.split("*/", 1)[1]
