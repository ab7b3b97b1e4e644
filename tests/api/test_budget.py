"""GET /api/v1/budget: ceilings, spend today and this month, open reservations, as money strings."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounting import ledger
from accounting.models import OwnerBudget
from tests.factories import spend

pytestmark = pytest.mark.django_db


def test_the_budget_shows_ceilings_spend_and_reservations(owner, owner_api):
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=Decimal("30"))
    spend(owner.pk, "0.612345")
    ledger.reserve(owner.pk, run_id=2, amount=Decimal("5"))

    response = owner_api.get("/budget")

    assert response.status_code == 200
    body = response.json()
    month = body.pop("month")
    assert body.pop("alerts") == {"thresholds": [50, 80, 100], "crossed": []}
    # No schedule: the month's forecast is what is spent.
    forecast = body.pop("forecast")
    assert forecast.pop("days_left") >= 1
    none = {"due": 0, "run": 0, "refused": 0, "skipped": 0}
    assert forecast == {
        "month_expected": "0.612345",
        "month_worst": "0.612345",
        "ceiling_reached_on": None,
        "worst_ceiling_reached_on": None,
        "daily_ceiling_days": 0,
        "worst_daily_ceiling_days": 0,
        "runs": none,
        "worst_runs": none,
        "stopped": [],
        "stopped_schedules": 0,
    }
    assert body == {
        "ceilings": {"daily": "30.00", "monthly": "250.00"},
        "spent": {"today": "0.612345", "month": "0.612345"},
        "open_reservations": {"count": 1, "total": "5.00"},
    }
    assert month["cost"] == "0.612345"  # the month by model adds up to the month's spend
    assert [(m["model"], m["calls"], m["cost"]) for m in month["by_model"]] == [
        ("sim-research", 1, "0.612345")
    ]


def test_the_budget_is_the_token_users_own(owner, other_owner, other_api):
    ledger.reserve(owner.pk, run_id=3, amount=Decimal("5"))

    body = other_api.get("/budget").json()

    assert body["open_reservations"] == {"count": 0, "total": "0.00"}
