"""The API of docs/contract.md#money-the-owner-sees-coming, every response checked against the schema
the API serves (tests/api/contract.py): alert thresholds, crossed alerts and the month's forecast on
the budget, a schedule's month, the monthly cap on explicit revisions, and skip reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from accounting import alerts
from accounting.models import OwnerBudget
from tests.api.conftest import Api, token_for
from tests.factories import limits, make_schedule, spend

pytestmark = pytest.mark.django_db

DEC_10 = datetime(2026, 12, 10, 6, 0, tzinfo=UTC)


def test_the_owner_sets_thresholds_and_reads_them_back(owner, owner_api):
    response = owner_api.request("PUT", "/budget/alerts", {"thresholds": [90, 25]})
    assert response.status_code == 200
    assert response.json() == {"thresholds": [25, 90]}
    assert owner_api.get("/budget").json()["alerts"] == {"thresholds": [25, 90], "crossed": []}


@pytest.mark.parametrize(
    "body",
    [
        {"thresholds": [0]},
        {"thresholds": [101]},
        {"thresholds": [50, 50]},
        {"thresholds": [1, 2, 3, 4, 5, 6]},
        {"thresholds": ["50"]},
        {"thresholds": [True]},
        {"thresholds": [50.0]},
        {"thresholds": [None]},
        {"thresholds": "50,80"},
        {"thresholds": {"50": 1}},
        {"thresholds": [2**70]},
        {},
        {"thresholds": [50], "extra": 1},
    ],
)
def test_bad_thresholds_are_a_422_naming_the_field_and_change_nothing(owner, owner_api, body):
    response = owner_api.request("PUT", "/budget/alerts", body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_body"
    assert set(error["fields"]) & {"thresholds", "extra"}
    assert OwnerBudget.objects.get(owner=owner).alert_thresholds == [50, 80, 100]


def test_a_body_that_is_not_json_is_a_422_and_a_read_token_a_403(owner, owner_api):
    assert owner_api.request("PUT", "/budget/alerts", raw="{thresholds").status_code == 422
    reader = Api(token_for(owner, "read"))
    assert reader.request("PUT", "/budget/alerts", {"thresholds": [50]}).status_code == 403


def test_the_budget_shows_crossed_thresholds_and_the_months_forecast(owner, owner_api, agent):
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        spend(owner.pk, "200.00", at=DEC_10 - timedelta(days=3))
        alerts.admit_one(owner.pk, run_id=5, amount=Decimal("1.00"))  # judged at admission: 80 % of month
        body = owner_api.get("/budget").json()
    assert body["alerts"]["crossed"] == [
        {"period": "month", "threshold": 80, "at": (DEC_10 - timedelta(hours=1)).isoformat()},
        {"period": "month", "threshold": 50, "at": (DEC_10 - timedelta(hours=1)).isoformat()},
    ]
    # 22 runs of USD 5 a day from Dec 10 on top of 200: the tenth reaches 250 on Dec 19, and
    # admission refuses the twelve after it (the reservation is not spend: it is released).
    runs = {"due": 22, "run": 10, "refused": 12, "skipped": 0}
    assert body["forecast"] == {
        "month_expected": "250.00",
        "month_worst": "250.00",
        "ceiling_reached_on": "2026-12-19",
        "worst_ceiling_reached_on": "2026-12-19",
        "days_left": 22,
        "daily_ceiling_days": 0,
        "worst_daily_ceiling_days": 0,
        "runs": runs,
        "worst_runs": runs,
        "stopped": [{"schedule_id": schedule.pk, "title": "Morning briefing", "refused": 12, "skipped": 0}],
        "stopped_schedules": 1,
    }


def test_a_schedule_carries_its_month(owner, owner_api, agent):
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        spend(owner.pk, "3.00", schedule_id=schedule.pk, at=DEC_10 - timedelta(days=1))
        body = owner_api.get(f"/schedules/{schedule.pk}").json()
    runs = {"due": 22, "run": 22, "refused": 0, "skipped": 0}
    assert body["month"] == {
        "spent": "3.00",
        "expected": "113.00",
        "worst": "113.00",
        "monthly_cap": None,
        "runs": runs,
        "worst_runs": runs,
    }
    assert body["revision"]["monthly_cap"] is None


def _pin(schedule, **extra):
    return {
        "limits": limits(max_cost="5.00").to_json(),
        "max_consecutive_failures": 2,
        "reason": "A monthly allowance.",
        **extra,
    }


def test_an_explicit_revision_pins_a_cap_and_refuses_one_below_a_run(owner, admin_api, agent):
    schedule = make_schedule(owner, agent)
    pinned = admin_api.post(f"/schedules/{schedule.pk}/revisions", _pin(schedule, monthly_cap="30.00"))
    assert pinned.status_code == 201
    assert pinned.json()["monthly_cap"] == "30.00"

    kept = admin_api.post(f"/schedules/{schedule.pk}/revisions", _pin(schedule))
    assert kept.json()["monthly_cap"] == "30.00"  # left out: the cap in force stays

    for cap, words in [("4.99", "below the cost limit of one run"), (3.5, "floating-point"), ("-1", "sign")]:
        refused = admin_api.post(f"/schedules/{schedule.pk}/revisions", _pin(schedule, monthly_cap=cap))
        assert refused.status_code == 422
        assert words in refused.json()["error"]["fields"]["monthly_cap"]

    removed = admin_api.post(f"/schedules/{schedule.pk}/revisions", _pin(schedule, monthly_cap=None))
    assert removed.json()["monthly_cap"] is None


def test_occurrences_say_why_a_slot_was_skipped(owner, owner_api, admin_api, agent):
    from schedules.execution import materialize_due

    with time_machine.travel(DEC_10 - timedelta(days=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
    admin_api.post(f"/schedules/{schedule.pk}/revisions", _pin(schedule, monthly_cap="6.00"))
    spend(owner.pk, "2.00", schedule_id=schedule.pk, at=DEC_10 - timedelta(days=2))
    with time_machine.travel(DEC_10 + timedelta(seconds=5), tick=False):
        materialize_due(enqueue=lambda ids: None, now=DEC_10 + timedelta(seconds=5))
    items = owner_api.get(f"/schedules/{schedule.pk}/occurrences").json()["items"]
    assert [(o["outcome"], o["skip_reason"]) for o in items] == [("skipped", "monthly_cap")]


def test_another_owners_schedule_month_is_a_404(other_api, owner, agent):
    schedule = make_schedule(owner, agent)
    assert other_api.get(f"/schedules/{schedule.pk}").status_code == 404
