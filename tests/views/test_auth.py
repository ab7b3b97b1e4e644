"""Signing in and out, and the top bar's budget headroom."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_sign_in_page_labels_its_fields(client):
    html = client.get("/login/").text
    assert '<label for="id_username">Username</label>' in html
    assert '<label for="id_password">Password</label>' in html


def test_signing_in_lands_on_the_schedules(owner):
    client = Client()
    response = client.post("/login/", {"username": "olga", "password": "correct horse battery staple"})
    assert response.status_code == 302 and response["Location"] == "/"


def test_a_wrong_password_is_refused_with_a_message(owner):
    response = Client().post("/login/", {"username": "olga", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.text


def test_the_top_bar_shows_headroom_today_and_this_month(owner_client):
    html = owner_client.get("/").text
    assert "Budget headroom: USD 25.00 left today, USD 250.00 left this month" in html


def test_signing_out_is_a_post_with_csrf(owner_client):
    html = owner_client.get("/").text
    assert 'action="/logout/"' in html
    response = owner_client.post("/logout/")
    assert response.status_code == 302
    assert owner_client.get("/").status_code == 302


@pytest.mark.parametrize(
    "url", ["/", "/budget/", "/conversations/", "/schedules/new/", "/runs/1/", "/schedules/1/"]
)
def test_every_owner_page_needs_sign_in(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_static_assets_are_local_and_htmx_is_the_vendored_copy(owner_client):
    html = owner_client.get("/").text
    assert '<script src="/static/django_htmx/htmx-2.min.js" defer></script>' in html
    assert '<link rel="stylesheet" href="/static/schedules/css/app.css">' in html
    assert "https://" not in html.split("<body", 1)[0]
    assert '<body hx-headers=\'{"x-csrftoken": "' in html
