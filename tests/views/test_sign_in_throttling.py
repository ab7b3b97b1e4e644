"""Guessing passwords stops working after a few tries: per user name and per address, with a
clear message and a way for an admin to lift it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from tests.factories import make_user

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple"


def sign_in(
    client: Client, username: str, password: str, *, address: str = "203.0.113.7", path: str = "/login/"
):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_after_five_wrong_passwords_even_the_right_one_is_refused_with_a_clear_message(settings):
    user = make_user("olga")
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(client, "olga", "wrong").status_code == 200  # the form again, with its error
    assert sign_in(client, "olga", "wrong").status_code == 429  # the fifth trips the lock
    response = sign_in(client, "olga", PASSWORD)
    assert response.status_code == 429
    assert "Sign-in paused" in response.text and "15 minutes" in response.text
    assert "_auth_user_id" not in client.session
    # From another address the name is still locked: per user name.
    assert sign_in(Client(), "olga", PASSWORD, address="198.51.100.9").status_code == 429
    assert user.is_active


def test_many_names_tried_from_one_address_lock_that_address(settings):
    make_user("olga")
    client = Client()
    for index in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, f"guess{index}", "wrong")
    assert sign_in(client, "olga", PASSWORD).status_code == 429
    assert sign_in(Client(), "olga", PASSWORD, address="198.51.100.9").status_code == 302  # another address


def test_a_correct_sign_in_resets_the_count(settings):
    make_user("olga")
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "olga", "wrong")
    assert sign_in(client, "olga", PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "olga", "wrong")
    assert sign_in(client, "olga", PASSWORD).status_code == 302


def test_an_admin_can_lift_a_lockout(settings):
    make_user("olga")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(Client(), "olga", "wrong")
    assert sign_in(Client(), "olga", PASSWORD).status_code == 429
    call_command("axes_reset_username", "olga", verbosity=0)
    call_command("axes_reset_ip", "203.0.113.7", verbosity=0)
    assert sign_in(Client(), "olga", PASSWORD).status_code == 302


def test_the_admin_sign_in_is_throttled_too(settings):
    make_user("ada", staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(Client(), "ada", "wrong", path="/admin/login/")
    assert sign_in(Client(), "ada", PASSWORD, path="/admin/login/").status_code == 429


def behind_the_proxy(client: Client, username: str, password: str, *, client_address: str, forged: str = ""):
    """A sign-in through one TLS-terminating proxy on 127.0.0.1, which appends what it saw."""
    chain = f"{forged}, {client_address}" if forged else client_address
    return client.post(
        "/login/",
        {"username": username, "password": password},
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR=chain,
    )


def test_behind_a_proxy_one_guesser_locks_only_their_own_address(settings):
    settings.TRUSTED_PROXY_COUNT = 1
    make_user("olga")
    guesser = Client()
    for index in range(settings.AXES_FAILURE_LIMIT):
        behind_the_proxy(guesser, f"guess{index}", "wrong", client_address="203.0.113.7")
    assert behind_the_proxy(guesser, "olga", PASSWORD, client_address="203.0.113.7").status_code == 429
    # Everyone else comes through the same proxy address, and signs in.
    assert behind_the_proxy(Client(), "olga", PASSWORD, client_address="198.51.100.9").status_code == 302


def test_a_forged_forwarded_for_does_not_escape_the_lock(settings):
    settings.TRUSTED_PROXY_COUNT = 1
    make_user("olga")
    guesser = Client()
    for index in range(settings.AXES_FAILURE_LIMIT):
        behind_the_proxy(
            guesser, f"guess{index}", "wrong", client_address="203.0.113.7", forged=f"10.0.0.{index}"
        )
    blocked = behind_the_proxy(guesser, "olga", PASSWORD, client_address="203.0.113.7", forged="10.9.9.9")
    assert blocked.status_code == 429  # the proxy's own hop is what counts, not what the client wrote


def test_no_proxy_is_trusted_unless_configured_in_production_too():
    from tests.test_site_url import PRODUCTION, settings_value

    # With no proxy in front, trusting X-Forwarded-For would let a client pick its own address.
    assert settings_value("TRUSTED_PROXY_COUNT", **PRODUCTION, SITE_URL="https://s.example.com") == "0"
    assert settings_value("TRUSTED_PROXY_COUNT", APP_ENV="development") == "0"
    behind = {**PRODUCTION, "SITE_URL": "https://s.example.com", "TRUSTED_PROXY_COUNT": "1"}
    assert settings_value("TRUSTED_PROXY_COUNT", **behind) == "1"


def test_without_a_trusted_proxy_a_forwarded_for_changes_nothing(settings):
    settings.TRUSTED_PROXY_COUNT = 0
    make_user("olga")
    guesser = Client()
    for index in range(settings.AXES_FAILURE_LIMIT):
        guesser.post(
            "/login/",
            {"username": f"guess{index}", "password": "wrong"},
            REMOTE_ADDR="203.0.113.7",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{index}",  # a new address per request, written by the client
        )
    blocked = guesser.post(
        "/login/",
        {"username": "olga", "password": PASSWORD},
        REMOTE_ADDR="203.0.113.7",
        HTTP_X_FORWARDED_FOR="10.9.9.9",
    )
    assert blocked.status_code == 429


def test_the_rule_in_force_is_said_in_words():
    from config.http import client_address_rule

    with override_settings(TRUSTED_PROXY_COUNT=0):
        assert "X-Forwarded-For is ignored" in client_address_rule()
    with override_settings(TRUSTED_PROXY_COUNT=1):
        assert "1 hop from the right of X-Forwarded-For" in client_address_rule()
