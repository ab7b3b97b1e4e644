"""Money typed by people and clients is read by one parser, the same way on every surface:
"5_0" is an error naming the field, never USD 50 (Python's Decimal reads it as 50)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from accounting.models import OwnerBudget
from accounting.money import MAX_AMOUNT, PRICE_PLACES, format_money, money_pattern, parse_money
from config import env

HOSTILE = [
    "5_0",
    "5\n",  # a `$` anchor matches before a final newline
    "5.00\n",
    "5E+0",
    "5e2",
    "\u0665.\u0660\u0660",
    "\uff15.00",
    "+5.00",
    "-5.00",
    "5.",
    ".5",
    "1,000.00",
    "5.001",
    "100000",
    "NaN",
    "Infinity",
    "0x10",
    "5 .00",
    "5.0.0",
    "",
    "   ",
    "\u00b2",
]


@given(st.text(max_size=12))
def test_every_string_the_parser_accepts_round_trips_to_the_same_canonical_text(text):
    try:
        amount = parse_money(text, "amount")
    except ValueError as refused:
        message = str(refused)
    else:
        message = ""
    if message:
        assert message.startswith("amount ")  # every refusal names the field
        return
    assert re.fullmatch(money_pattern(), text.strip(" "))  # only the documented grammar passes
    assert amount == Decimal(text.strip(" ")) and 0 <= amount < MAX_AMOUNT
    canonical = format_money(amount)
    assert parse_money(canonical, "amount") == amount
    assert format_money(parse_money(canonical, "amount")) == canonical


@given(st.decimals(min_value=0, max_value=Decimal("99999.99"), places=2, allow_nan=False))
def test_every_amount_in_cents_is_accepted_in_its_canonical_form(amount):
    assert parse_money(format_money(amount), "amount") == amount


@given(st.from_regex(r"\A[0-9]{1,4}(\.[0-9]{1,2})?\Z"), st.sampled_from(["_", "e0", "E+1", ",0", "-", "+"]))
def test_a_separator_exponent_or_sign_anywhere_is_refused(number, noise):
    for text in (noise + number, number + noise, number[:1] + noise + number[1:]):
        if text == number:
            continue
        with pytest.raises(ValueError, match=r"^amount "):
            parse_money(text, "amount")


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_amounts_are_refused(text):
    with pytest.raises(ValueError, match=r"^max_cost "):
        parse_money(text, "max_cost")


def test_prices_may_have_six_places_and_usd_amounts_two():
    assert parse_money("0.075", "price", places=PRICE_PLACES) == Decimal("0.075")
    with pytest.raises(ValueError, match="at most 2 decimal places"):
        parse_money("0.075", "max_cost")


def test_floats_are_refused_and_integers_accepted():
    assert parse_money(5, "max_cost") == Decimal(5)
    with pytest.raises(ValueError, match="floating-point"):
        parse_money(5.0, "max_cost")


@pytest.mark.parametrize("value", ["5_0", "5E+0", "\u0665.00", "-1.00", "0"])
def test_a_ceiling_in_the_environment_is_refused_at_start_up_with_one_line(monkeypatch, value):
    monkeypatch.setenv("DAILY_COST_CEILING", value)
    with pytest.raises(ImproperlyConfigured, match=r"^DAILY_COST_CEILING "):
        env.env_money("DAILY_COST_CEILING", "25.00")


@pytest.mark.parametrize(
    ("value", "ok"), [("0.5", True), ("20", True), ("5_0", False), ("1e3", False), ("0", False)]
)
def test_durations_in_the_environment_are_plain_numbers(monkeypatch, value, ok):
    monkeypatch.setenv("PROVIDER_BACKOFF_BASE_SECONDS", value)
    if ok:
        assert env.env_seconds("PROVIDER_BACKOFF_BASE_SECONDS", "0.5") == float(value)
    else:
        with pytest.raises(ImproperlyConfigured):
            env.env_seconds("PROVIDER_BACKOFF_BASE_SECONDS", "0.5")


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["5_0", "5E+0", "\u0665.00", "\uff15.00", "5.001"])
def test_the_admin_budget_form_refuses_a_misreadable_ceiling_and_writes_nothing(admin_user, owner, value):
    client = Client()
    client.force_login(admin_user)
    budget = OwnerBudget.objects.get(owner=owner)
    url = f"/admin/accounting/ownerbudget/{budget.pk}/change/"
    response = client.post(url, {"owner": owner.pk, "timezone": "Europe/Riga", "daily_ceiling": value})
    assert response.status_code == 200  # the form again, with its error
    assert "daily ceiling" in response.text.lower() and "errorlist" in response.text
    budget.refresh_from_db()
    assert budget.daily_ceiling is None


@pytest.mark.django_db
def test_the_admin_budget_form_saves_a_ceiling_in_cents(admin_user, owner):
    client = Client()
    client.force_login(admin_user)
    budget = OwnerBudget.objects.get(owner=owner)
    url = f"/admin/accounting/ownerbudget/{budget.pk}/change/"
    response = client.post(url, {"owner": owner.pk, "timezone": "Europe/Riga", "daily_ceiling": "12.50"})
    assert response.status_code == 302
    budget.refresh_from_db()
    assert budget.daily_ceiling == Decimal("12.50")
