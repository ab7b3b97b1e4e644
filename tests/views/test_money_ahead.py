"""The dashboard's money ahead (docs/contract.md#money-the-owner-sees-coming): the alert thresholds in
settings, the month's forecast on the budget page, a schedule's month against its cap, and the cap
offered on the request form and the admin's pin page with what it would have skipped."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client

from accounting import alerts
from accounting.models import AccountingEvent, OwnerBudget
from schedules import services
from schedules.models import RevisionRequest, ScheduleRevision
from schedules.schemas import parse_explicit
from tests.factories import limits, make_schedule, spend

pytestmark = pytest.mark.django_db

DEC_10 = datetime(2026, 12, 10, 6, 0, tzinfo=UTC)


def _text(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(page)).split())


@pytest.fixture
def admin_client(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize(
    ("typed", "saved"),
    [("50, 80, 100", [50, 80, 100]), ("90 75", [75, 90]), ("25%, 100 %", [25, 100]), ("", [])],
)
def test_the_owner_sets_thresholds_in_settings(owner, owner_client, typed, saved):
    response = owner_client.post("/settings/alerts/", {"thresholds": typed}, follow=True)
    assert OwnerBudget.objects.get(owner=owner).alert_thresholds == saved
    assert ("Budget alerts are off." if not saved else "Budget alerts at") in _text(response.text)


@pytest.mark.parametrize(
    ("typed", "words"),
    [
        ("0, 50", "0 is outside 1-100"),
        ("50, 50", "Each threshold may be given once"),
        ("10 20 30 40 50 60", "At most 5 thresholds"),
        ("fifty", "'fifty' is not a whole percentage"),
        ("50.5", "'50.5' is not a whole percentage"),
        ("\u0665\u0660", "not a whole percentage"),  # Arabic-Indic digits
        ("<script>alert(1)</script>", "not a whole percentage"),
    ],
)
def test_bad_thresholds_re_render_with_the_field_error_and_save_nothing(owner, owner_client, typed, words):
    response = owner_client.post("/settings/alerts/", {"thresholds": typed})
    assert response.status_code == 200
    assert words in html.unescape(response.text)
    assert "<script>alert(1)</script>" not in response.text
    assert OwnerBudget.objects.get(owner=owner).alert_thresholds == [50, 80, 100]


def test_the_budget_page_says_when_the_ceiling_is_reached_at_this_pace(owner, owner_client, agent):
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        make_schedule(owner, agent, title="Morning briefing", cron="0 8 * * *")
        spend(owner.pk, "200.00", at=DEC_10 - timedelta(days=3))
        text = _text(owner_client.get("/budget/").text)
    assert "At this pace you reach USD 250.00 on Dec 19" in text
    assert "so the month stops at about USD 250.00" in text
    assert (
        "Of the 22 runs due to the month\u2019s end, about 10 would run; 12 would be refused admission"
        in text
    )
    assert "Morning briefing : 12 runs refused" in text
    assert "Morning briefing 22 12 USD 0.00 USD 50.00 USD 5.00 a run USD 50.00 none" in text
    assert "Alerts at 50 %, 80 %, 100 % of each ceiling" in text


def test_the_budget_page_with_nothing_scheduled_says_what_the_month_comes_to(owner_client):
    text = _text(owner_client.get("/budget/").text)
    assert "At this pace you end the month at about USD 0.00 of USD 250.00" in text
    assert "No schedule has runs left this month" in text


def test_a_one_time_schedule_whose_run_is_in_flight_has_no_runs_left_on_the_budget_page(
    owner, owner_client, agent
):
    from schedules.execution import materialize_due

    slot = DEC_10 + timedelta(hours=3)
    with time_machine.travel(DEC_10, tick=False):
        make_schedule(owner, agent, title="Quarterly review", cron=None, run_at=slot)
        assert "Quarterly review" in _text(owner_client.get("/budget/").text)
    with time_machine.travel(slot + timedelta(seconds=5), tick=False):
        materialize_due(enqueue=lambda ids: None, now=slot + timedelta(seconds=5))  # its run queued
        text = _text(owner_client.get("/budget/").text)
    assert "No schedule has runs left this month" in text
    assert "Quarterly review" not in text


def test_a_schedule_page_shows_this_months_spend_against_its_cap(owner, owner_client, agent, admin_user):
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        schedule = make_schedule(owner, agent, cron="0 8 * * *")
        body = {
            "limits": limits(max_cost="5.00").to_json(),
            "max_consecutive_failures": 2,
            "reason": "Cap it.",
            "monthly_cap": "40.00",
        }
        services.pin_revision(schedule, parse_explicit(body), by=admin_user, via="admin")
        spend(owner.pk, "12.00", schedule_id=schedule.pk, at=DEC_10 - timedelta(days=1))
        text = _text(owner_client.get(f"/schedules/{schedule.pk}/").text)
    assert "This month USD 12.00 spent of its USD 40.00 monthly cap" in text
    # Each run reserves USD 5: from 12.00, five runs fit under the USD 40 cap (37.00), the rest are skipped.
    assert (
        "22 runs left this month: about USD 37.00 by its end, USD 37.00 at worst (the cap stops it there)"
        in text
    )
    assert "About 17 runs would be skipped at its monthly cap." in text
    assert "Monthly cap: USD 40.00" in text


def test_the_request_form_offers_the_cap_and_replays_it_by_month(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    for day in range(4):
        AccountingEvent.objects.create(
            event=AccountingEvent.Kind.RUN_ACCOUNTED,
            owner_id=owner.pk,
            schedule_id=schedule.pk,
            run_id=900 + day,
            created_at=datetime.now(UTC).replace(day=1, hour=8) + timedelta(days=day),
            payload={"status": "completed", "usage": {"steps": 2, "cost": "4.00"}, "failure": None},
        )
    page = owner_client.get(
        f"/schedules/{schedule.pk}/request-limits/", {"check": "1", "monthly_cap": "12.00"}
    )
    text = _text(page.text)
    assert "Monthly cap (USD)" in text
    assert "What a monthly cap of USD 12.00 would have done" in text
    assert "4 runs, USD 16.00 Stops 2 runs skipped from" in text

    limits_typed = {k: str(v) for k, v in schedule.revision.limits.items()}
    owner_client.post(
        f"/schedules/{schedule.pk}/request-limits/",
        {**limits_typed, "max_consecutive_failures": "2", "monthly_cap": "30.00", "reason": "Cap it at 30."},
    )
    assert RevisionRequest.objects.get(schedule=schedule).monthly_cap == Decimal("30.00")


def test_the_request_form_refuses_a_cap_below_one_run(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    limits_typed = {k: str(v) for k, v in schedule.revision.limits.items()}
    response = owner_client.post(
        f"/schedules/{schedule.pk}/request-limits/",
        {**limits_typed, "max_consecutive_failures": "2", "monthly_cap": "1.00", "reason": "Tiny."},
    )
    assert response.status_code == 200
    assert "below the cost limit of one run (USD 5.00)" in _text(response.text)
    assert not RevisionRequest.objects.filter(schedule=schedule).exists()


def test_the_admin_pins_a_cap_after_reviewing_it(admin_client, owner, agent):
    schedule = make_schedule(owner, agent)
    data = {
        **{k: str(v) for k, v in schedule.revision.limits.items()},
        "max_consecutive_failures": "2",
        "monthly_cap": "25.00",
        "reason": "A monthly allowance.",
        "base_revision": "1",
    }
    review = _text(admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", data).text)
    assert "Monthly cap none 25.00" in review
    admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", {**data, "confirm": "Confirm"})
    assert ScheduleRevision.objects.get(schedule=schedule, number=2).monthly_cap == Decimal("25.00")

    low = {**data, "monthly_cap": "2.00", "base_revision": "2"}
    refused = _text(admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", low).text)
    assert "below the cost limit of one run" in refused
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 2


def test_a_crossed_threshold_shows_in_the_top_bar_of_every_page(owner, owner_client):
    alerts.admit_one(owner.pk, run_id=1, amount=Decimal("20.50"))  # 82 % of the day
    for path in ("/", "/budget/", "/settings/", "/conversations/"):
        assert "80 % of today\u2019s budget used" in html.unescape(owner_client.get(path).text), path


def test_the_forecast_table_stays_short_for_an_owner_with_many_schedules(
    owner, owner_client, agent, settings
):
    settings.MAX_ACTIVE_SCHEDULES = 100
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=10_000, monthly_ceiling=100_000)
    with time_machine.travel(DEC_10 - timedelta(hours=1), tick=False):
        for n in range(30):
            make_schedule(owner, agent, title=f"Digest {n:02}", cron="0 8 * * *")
        text = _text(owner_client.get("/budget/").text)
    assert text.count(" 22 none USD 0.00 USD 110.00") == 25
    assert "And 5 more schedules with runs left, each expected to spend less" in text
    # All thirty are in the month: 30 x 22 runs x USD 5.00.
    assert "Worst case USD 3,300.00" in text
