"""The owner's notification settings: channels, a webhook URL that must be safe, a signing secret
shown once, a test button, and the attempts on the schedule page."""

from __future__ import annotations

import pytest
from django.test import Client

from schedules import notices
from schedules.models import Notice, NotificationAttempt, NotificationSettings
from tests.notifications.conftest import webhook_server  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db


def test_the_page_explains_what_is_sent_and_offers_the_channels(owner_client):
    response = owner_client.get("/settings/")
    assert response.status_code == 200
    assert "never contains a prompt, an answer or a provider" in response.text
    assert 'name="webhook_url"' in response.text
    assert "Nothing sent yet" in response.text


def test_saving_a_webhook_shows_its_secret_once(owner_client, owner):
    response = owner_client.post(
        "/settings/",
        {"email_enabled": "on", "webhook_enabled": "on", "webhook_url": "http://localhost:9000/hook"},
    )
    assert response.status_code == 200
    channels = NotificationSettings.objects.get(owner=owner)
    assert channels.webhook_active and channels.email_enabled
    assert channels.webhook_secret in response.text
    assert "It is not shown again" in response.text
    again = owner_client.get("/settings/")
    assert channels.webhook_secret not in again.text


def test_an_insecure_webhook_url_is_refused_with_a_field_error_and_nothing_is_saved(owner_client, owner):
    response = owner_client.post(
        "/settings/", {"webhook_enabled": "on", "webhook_url": "http://example.com/hook"}
    )
    assert response.status_code == 200
    assert "must use https://" in response.text
    assert "Nothing was saved" in response.text
    assert not NotificationSettings.objects.filter(owner=owner, webhook_enabled=True).exists()


def test_turning_the_webhook_on_without_a_url_is_refused(owner_client):
    response = owner_client.post("/settings/", {"webhook_enabled": "on", "webhook_url": ""})
    assert "webhook_url is required to turn the webhook on" in response.text


def test_rotating_the_secret_shows_the_new_one_once(owner_client, owner):
    owner_client.post("/settings/", {"webhook_enabled": "on", "webhook_url": "http://localhost:9000/hook"})
    old = NotificationSettings.objects.get(owner=owner).webhook_secret
    response = owner_client.post("/settings/rotate-secret/")
    new = NotificationSettings.objects.get(owner=owner).webhook_secret
    assert new != old and new in response.text and old not in response.text


def test_the_test_button_reaches_a_local_endpoint_and_reports_it(owner_client, owner, webhook_server):  # noqa: F811
    owner_client.post("/settings/", {"webhook_enabled": "on", "webhook_url": webhook_server.url})
    response = owner_client.post("/settings/test/", follow=True)
    assert "Test webhook: delivered (HTTP 200)." in response.text
    assert len(webhook_server.received) == 1
    assert webhook_server.received[0].json["test"] is True
    assert NotificationAttempt.objects.get(owner=owner).is_test


def test_the_test_button_tries_once_and_says_when_it_failed(owner_client, webhook_server):  # noqa: F811
    webhook_server.replies = [(503, 0)]
    owner_client.post("/settings/", {"webhook_enabled": "on", "webhook_url": webhook_server.url})
    response = owner_client.post("/settings/test/", follow=True)
    assert "Test webhook: failed (HTTP 503)." in response.text
    assert len(webhook_server.received) == 1


@pytest.mark.parametrize("path", ["/settings/rotate-secret/", "/settings/test/"])
def test_actions_are_post_only(owner_client, path):
    assert owner_client.get(path).status_code == 405


@pytest.mark.parametrize("path", ["/settings/", "/settings/rotate-secret/", "/settings/test/"])
def test_posts_need_the_csrf_token(csrf_client, path):
    assert csrf_client.post(path, {}).status_code == 403


def test_signed_out_visitors_are_sent_to_sign_in():
    response = Client().get("/settings/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_schedule_page_lists_the_notifications_sent_for_it(
    owner_client, owner, paused_after_two_failures
):
    owner.email = "olga@example.com"
    owner.save()
    event = paused_after_two_failures.pause
    notices.deliver(Notice.objects.get(pause_event_id=event.pk).pk)
    response = owner_client.get(f"/schedules/{paused_after_two_failures.pk}/")
    assert '<h2 id="notifications-heading">Notifications</h2>' in response.text
    assert "Email, the pause" in response.text
    assert "sent to olga@example.com" in response.text
