"""The owner sees money coming: a run's charge takes the day's spend past 80 %, and the top bar says
so on every page until the day ends; the budget page shows the month's forecast in a bar and in
words; the settings page takes new thresholds and refuses bad ones on the field; a schedule's page
shows this month against its cap. axe finds no serious or critical violation on any of them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from accounting import alerts, ledger
from accounting.models import BudgetAlert, OwnerBudget
from runs.steps import judge_alerts
from schedules import services
from schedules.models import Schedule
from schedules.schemas import parse_explicit
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot, sign_in
from tests.factories import limits, spend

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def test_an_owner_past_80_percent_sees_the_alert_the_forecast_and_the_cap(browser, live_server, demo):
    base = live_server.url
    owner = demo["owner"]
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=Decimal("10.00"))
    # As the admin's save of a ceiling does: this process's reading of where the owner stood under
    # the demo's ceiling (the demo's runs were charged moments ago) is dropped.
    alerts.rearm(owner.pk)
    schedule = Schedule.objects.filter(owner=owner, status=Schedule.Status.ACTIVE).order_by("pk").first()
    assert schedule is not None
    body = {
        "limits": limits(max_cost="1.00", synthesis_reserve_cost="0.25").to_json(),
        "max_consecutive_failures": 2,
        "reason": "A monthly allowance for the briefing.",
        "monthly_cap": "20.00",
    }
    services.pin_revision(schedule, parse_explicit(body), by=demo["admin"], via="admin")
    already = ledger.summarize(owner.pk).spent_today
    charge = Decimal("8.20") - already  # the day at 82 % of USD 10
    spend(owner.pk, charge, run_id=990, schedule_id=schedule.pk)
    judge_alerts(ledger.Call(owner.pk, 990, schedule.pk, "simulated", "m", 1, 1, charge, timezone.now()))
    assert BudgetAlert.objects.filter(owner=owner, period="day", threshold=80).exists()

    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "owner")

    alert = page.locator(".budget-alert")
    assert alert.inner_text() == "80 % of today\u2019s budget used"
    assert alert.get_attribute("href").endswith("/budget/#forecast-heading")
    shoot(page, "top-bar-budget-alert", readme=True, full_page=False)

    alert.click()
    page.wait_for_load_state()
    forecast = page.locator("section[aria-labelledby=forecast-heading]")
    words = forecast.locator(".forecast__words").inner_text()
    assert "At this pace you" in words
    assert forecast.locator(".meter--forecast").get_attribute("aria-label").endswith("monthly ceiling")
    assert schedule.title in forecast.locator("table").inner_text()
    assert "80 % of today\u2019s ceiling" in forecast.inner_text()
    shoot(page, "budget-forecast", readme=True)
    assert serious_violations(page) == []

    page.goto(f"{base}/schedules/{schedule.pk}/")
    month = page.locator("section[aria-labelledby=month-heading]")
    assert "of its USD 20.00 monthly cap" in month.inner_text()
    assert "Monthly cap: USD 20.00" in page.locator("section[aria-labelledby=limits-heading]").inner_text()
    shoot(page, "schedule-month-cap")
    assert serious_violations(page) == []

    page.goto(f"{base}/settings/")
    field = page.get_by_label("Tell me when spend reaches these percentages of a ceiling")
    assert field.input_value() == "50, 80, 100"
    field.fill("50, 150")
    page.get_by_role("button", name="Save thresholds").click()
    page.wait_for_load_state()
    assert "150 is outside 1-100" in page.locator("#alert-settings").inner_text()
    assert OwnerBudget.objects.get(owner=owner).alert_thresholds == [50, 80, 100]
    assert serious_violations(page) == []
    page.get_by_label("Tell me when spend reaches these percentages of a ceiling").fill("75, 90")
    page.get_by_role("button", name="Save thresholds").click()
    page.wait_for_load_state()
    assert "Budget alerts at 75 %, 90 %." in page.inner_text("body")
    assert OwnerBudget.objects.get(owner=owner).alert_thresholds == [75, 90]

    phone = browser.new_context(viewport=PHONE, color_scheme="light")
    small = phone.new_page()
    sign_in(small, base, "owner")
    small.goto(f"{base}/budget/")
    assert small.locator(".budget-alert").is_visible()
    shoot(small, "budget-forecast-phone")
    assert serious_violations(small) == []
    context.close()
    phone.close()
