"""Only IANA time zone names are accepted, everywhere a zone enters: files zoneinfo can open but
that are not places (`localtime`, `posixrules`, `Factory`, `right/UTC`) are refused."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from accounting.models import OwnerBudget
from accounting.timezones import is_time_zone
from config import env
from tests.api.conftest import Api, token_for

NOT_ZONES = [
    "localtime",
    "posixrules",
    "Factory",
    "right/UTC",
    "posix/Europe/Riga",
    "Europe/Nowhere",
    "",
    "UTC\x00",
]


@pytest.mark.parametrize("name", NOT_ZONES)
def test_files_that_are_not_places_are_not_time_zones(name):
    assert not is_time_zone(name)


@pytest.mark.parametrize("name", ["UTC", "Europe/Riga", "Asia/Kathmandu", "America/Argentina/Buenos_Aires"])
def test_iana_names_are(name):
    assert is_time_zone(name)


@pytest.mark.parametrize("name", ["localtime", "Factory", "right/UTC"])
def test_the_environment_refuses_them(monkeypatch, name):
    monkeypatch.setenv("DEFAULT_OWNER_TIME_ZONE", name)
    with pytest.raises(ImproperlyConfigured, match="IANA time zone"):
        env.env_timezone("DEFAULT_OWNER_TIME_ZONE", "UTC")


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["localtime", "Factory", "posixrules", "right/UTC"])
def test_the_api_refuses_them_for_a_schedule(owner, agent, name):
    body = {"title": "t", "prompt": "p", "agent": agent.name, "cron": "0 9 * * *", "timezone": name}
    response = Api(token_for(owner, "read", "write")).post("/schedules", body)
    assert response.status_code == 422
    assert "IANA time zone" in response.json()["error"]["fields"]["timezone"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["localtime", "Factory"])
def test_the_admin_refuses_them_for_an_owner(admin_user, owner, name):
    client = Client()
    client.force_login(admin_user)
    budget = OwnerBudget.objects.get(owner=owner)
    response = client.post(
        f"/admin/accounting/ownerbudget/{budget.pk}/change/", {"owner": owner.pk, "timezone": name}
    )
    assert response.status_code == 200 and "is not an IANA time zone" in response.text
    budget.refresh_from_db()
    assert budget.timezone == "Europe/Riga"
