"""Completion notices on the dashboard: the owner's setting on the settings page, and each
schedule's override on its page."""

from __future__ import annotations

import pytest

from schedules import notices
from tests.factories import make_schedule
from tests.views.conftest import HTMX

pytestmark = pytest.mark.django_db


def test_the_schedule_page_says_what_it_does_and_saves_the_override(owner, agent, owner_client):
    schedule = make_schedule(owner, agent)
    page = owner_client.get(f"/schedules/{schedule.pk}/").text
    assert "Follows your settings: off unless you turned completion notices on." in page

    response = owner_client.post(
        f"/schedules/{schedule.pk}/completion-notices/", {"completion_notices": "on"}, headers=HTMX
    )
    again = owner_client.post(f"/schedules/{schedule.pk}/completion-notices/", {"completion_notices": "on"})

    schedule.refresh_from_db()
    assert schedule.completion_notices is True
    assert response.text.lstrip().startswith('<section id="completion-notices"')
    assert "You are told each time one of its runs completes." in response.text
    assert again.status_code == 302
    assert owner_client.get(f"/schedules/{schedule.pk}/completion-notices/").status_code == 405


def test_another_owners_schedule_override_is_404(owner, agent, other_client):
    schedule = make_schedule(owner, agent)
    response = other_client.post(
        f"/schedules/{schedule.pk}/completion-notices/", {"completion_notices": "on"}
    )
    assert response.status_code == 404
    schedule.refresh_from_db()
    assert schedule.completion_notices is None


def test_the_settings_page_turns_them_on_and_off(owner, owner_client, csrf_client):
    page = owner_client.get("/settings/").text
    assert "Completion notices" in page and "Email me when a scheduled run completes" in page

    response = owner_client.post("/settings/completions/", {"completion_email": "on"}, follow=True)
    assert "Completion notices are on." in response.text
    channels = notices.settings_for(owner.pk)
    assert (channels.completion_email, channels.completion_webhook, channels.webhook_content) == (
        True,
        False,
        False,
    )
    owner_client.post("/settings/completions/", {})
    assert notices.settings_for(owner.pk).completion_email is False
    assert owner_client.get("/settings/completions/").status_code == 405
    assert csrf_client.post("/settings/completions/", {"completion_email": "on"}).status_code == 403
