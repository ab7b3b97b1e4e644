"""Every response carries a Content-Security-Policy that allows only this origin's scripts, plus
Referrer-Policy and X-Content-Type-Options; and no page relies on inline script to work."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.factories import fail, make_schedule, materialize

pytestmark = pytest.mark.django_db

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
HANDLER_ATTRIBUTE = re.compile(r"\s(on[a-z]+|hx-on[:\w-]*)=", re.IGNORECASE)


@pytest.fixture
def pages(owner, agent):
    schedule = make_schedule(owner, agent)
    run = fail(materialize(schedule))
    return [
        "/",
        f"/schedules/{schedule.pk}/",
        "/schedules/new/",
        f"/schedules/{schedule.pk}/edit/",
        f"/runs/{run.pk}/",
        "/conversations/",
        f"/conversations/{run.conversation_id}/delete/",
        "/budget/",
        "/settings/",
    ]


def test_every_page_has_the_headers_and_no_inline_script(owner_client, pages):
    for url in pages:
        response = owner_client.get(url)
        assert response.status_code == 200, url
        policy = response["Content-Security-Policy"]
        assert (
            "script-src 'self'" in policy
            and "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
        )
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
        assert response["Referrer-Policy"] == "same-origin"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert INLINE_SCRIPT.findall(response.text) == [], url
        assert HANDLER_ATTRIBUTE.findall(response.text) == [], url


def test_htmx_is_configured_without_eval(owner_client):
    page = owner_client.get("/").text
    assert '"allowEval": false' in page


def test_the_login_page_and_the_api_carry_the_policy_too(admin_user):
    assert "default-src 'self'" in Client().get("/login/")["Content-Security-Policy"]
    assert "default-src 'self'" in Client().get("/api/v1/openapi.json")["Content-Security-Policy"]
    admin = Client()
    admin.force_login(admin_user)
    response = admin.get("/admin/")
    assert "default-src 'self'" in response["Content-Security-Policy"]
    assert INLINE_SCRIPT.findall(response.text) == []
