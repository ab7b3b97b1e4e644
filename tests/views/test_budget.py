"""The budget page: spend against the ceilings, open reservations, and the daily chart."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from accounting import ledger
from tests.factories import finish, make_schedule, materialize, spend

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _usage(owner_id: int, schedule_id: int | None, cost: str, days_ago: int, run_id: int = 1) -> None:
    at = timezone.now() - timedelta(days=days_ago)
    spend(owner_id, cost, run_id=run_id, schedule_id=schedule_id, at=at, tokens=(10, 10))


def test_spend_today_and_this_month_against_the_ceilings(owner, owner_client, agent):
    schedule = make_schedule(owner, agent, title="Morning briefing")
    _usage(owner.pk, schedule.pk, "1.25", 0)
    text = _text(owner_client.get("/budget/").text)
    assert "Today USD 1.25 spent of USD 25.00" in text
    assert "USD 23.75 headroom after open reservations" in text
    assert "This month" in text and "spent of USD 250.00" in text


def test_open_reservations_are_listed_with_their_runs(owner, owner_client, agent):
    occurrence = materialize(make_schedule(owner, agent))
    ledger.reserve(owner.pk, run_id=occurrence.run_id, amount=Decimal("5.00"))
    text = _text(owner_client.get("/budget/").text)
    assert "USD 5.00 for 1 run in flight" in text
    assert f"Run {occurrence.run_id}" in text
    finish(occurrence)
    assert "No run is in flight" in owner_client.get("/budget/").text


def test_the_chart_stacks_30_days_by_schedule_in_svg(owner, owner_client, agent):
    titles = [f"Schedule {n}" for n in range(7)]
    schedules = [make_schedule(owner, agent, title=t) for t in titles]
    for rank, schedule in enumerate(schedules):
        for day in range(0, 40, 3):
            _usage(owner.pk, schedule.pk, str(Decimal("0.10") * (rank + 1)), day)
    _usage(owner.pk, None, "0.05", 1)
    html = owner_client.get("/budget/").text
    assert '<svg class="chart"' in html
    assert "<script" not in html.split("<main", 1)[1]
    assert html.count("<rect ") >= 10 * 6
    legend = _text(html.split('<ul class="legend">', 1)[1].split("</ul>", 1)[0])
    assert "Schedule 6" in legend and "Schedule 2" in legend and "Schedule 1" not in legend
    assert "Other schedules" in legend and "Interactive runs" in legend
    assert "Show the numbers" in html


def test_the_chart_says_so_when_nothing_was_spent(owner_client):
    assert "Nothing spent in the last 30 days" in owner_client.get("/budget/").text


def test_the_budget_page_costs_a_fixed_number_of_queries(
    owner, owner_client, agent, django_assert_max_num_queries
):
    for n in range(12):
        schedule = make_schedule(owner, agent, title=f"S{n}")
        for day in range(30):
            _usage(owner.pk, schedule.pk, "0.01", day)
    # 12, and the month's forecast (active schedules, their spend, their recent runs' median): a
    # fixed number however many schedules and days (the thresholds crossed come with the budget row).
    with django_assert_max_num_queries(15):
        response = owner_client.get("/budget/")
    assert response.status_code == 200


def test_another_owners_spend_is_not_shown(other_client, owner, agent):
    schedule = make_schedule(owner, agent)
    _usage(owner.pk, schedule.pk, "3.00", 0)
    text = _text(other_client.get("/budget/").text)
    assert "Today USD 0.00 spent" in text
