"""Scenario 2: an admin pins an explicit revision: an invalid reserve is a field error, a valid
one is reviewed as a diff, confirmed, and appears as a new dated revision in the history."""

from __future__ import annotations

import pytest

from schedules.models import Schedule, ScheduleRevision
from tests.browser.conftest import LAPTOP, serious_violations, shoot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, reset_sequences=True)]

TITLE = "Weekly spend review (old USD 1 budget)"


def test_the_admin_pins_a_revision_after_fixing_an_invalid_reserve(browser, live_server, demo):
    base = live_server.url
    schedule = Schedule.objects.get(title=TITLE)
    before = ScheduleRevision.objects.filter(schedule=schedule).count()
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "admin", admin=True)

    page.goto(f"{base}/admin/schedules/schedule/{schedule.pk}/change/")
    page.get_by_role("link", name="Pin a revision").click()
    page.wait_for_load_state()
    assert page.get_by_label("Max cost (USD)").input_value() == "1.00"
    shoot(page, "pin-revision", readme=True)
    assert serious_violations(page) == []

    # A reserve that is not below its total: refused, named, nothing written.
    page.get_by_label("Synthesis reserve — cost (USD)").fill("2.00")
    page.get_by_label("Reason").fill("The chat policy: a USD 5 budget with a final-synthesis reserve")
    page.get_by_role("button", name="Review the change").click()
    page.wait_for_load_state()
    error = page.locator(".errorlist").first.inner_text()
    assert error == "synthesis_reserve_cost must be below max_cost (2.00 ≥ 1.00)"
    shoot(page, "pin-revision-error")
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == before

    # A valid one: reviewed as a diff, then confirmed.
    page.get_by_label("Max cost (USD)").fill("5.00")
    page.get_by_label("Synthesis reserve — cost (USD)").fill("1.00")
    page.get_by_label("Synthesis reserve — steps").fill("2")
    page.get_by_role("button", name="Review the change").click()
    page.wait_for_load_state()
    diff = page.locator("table.pin-diff").inner_text()
    assert "Max cost (USD)" in diff and "USD 1.00" in diff and "USD 5.00" in diff
    shoot(page, "pin-revision-review")
    page.get_by_role("button", name="Confirm and pin the revision").click()
    page.wait_for_load_state()
    assert "Pinned revision" in page.locator(".messagelist").inner_text()

    revision = ScheduleRevision.objects.filter(schedule=schedule).latest("number")
    assert revision.number == before + 1 and revision.path == "explicit" and revision.via == "admin"
    assert revision.limits["max_cost"] == "5.00" and revision.limits["synthesis_reserve_cost"] == "1.00"
    context.close()

    # The owner sees it as a new, dated revision with who, path, reason and the diff.
    owner = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = owner.new_page()
    sign_in(page, base, "owner")
    page.goto(f"{base}/schedules/{schedule.pk}/")
    newest = page.locator(".timeline__item").first
    text = newest.inner_text()
    assert "by admin · explicit via admin" in text
    assert "The chat policy: a USD 5 budget" in text
    assert "max cost" in text and "USD 5.00" in text
    assert newest.locator("time").get_attribute("datetime") == revision.created_at.isoformat()
    owner.close()
