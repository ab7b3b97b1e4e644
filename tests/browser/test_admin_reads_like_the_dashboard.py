"""Scenario 4: the admin's schedule pages read like the dashboard: the changelist fits 1280 px with
the navigation sidebar open and reads as cards on a phone; the change page offers no Save or
Delete, shows the limits as a table and numbered revisions with their diffs, times in UTC."""

from __future__ import annotations

import pytest

from schedules.models import Schedule
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, reset_sequences=True)]

FITS = "(() => { const r = document.querySelector('#changelist-form .results');"
FITS += " return r.scrollWidth <= r.clientWidth; })()"


def test_the_schedule_changelist_fits_a_laptop_with_the_sidebar_open_and_a_phone(browser, live_server, demo):
    base = live_server.url
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "admin", admin=True)
    page.goto(f"{base}/admin/schedules/schedule/")
    assert page.locator("#nav-sidebar").is_visible()
    assert page.evaluate(FITS)  # no column pushed off screen
    headers = [h.strip() for h in page.locator("#result_list thead th").all_inner_texts() if h.strip()]
    assert headers == ["SCHEDULE", "STATUS", "LAST RUN", "NEXT RUN (UTC)"]
    row = page.locator("#result_list tr", has_text="Anthropic news briefing")
    assert "failure limit · 2 of 2 failures" in row.inner_text()
    assert "transient · HTTP 529 · overloaded_error" in row.inner_text()
    shoot(page, "admin-schedules", readme=True)
    assert serious_violations(page) == []
    context.close()

    phone = browser.new_context(viewport=PHONE, color_scheme="light", is_mobile=True)
    page = phone.new_page()
    sign_in(page, base, "admin", admin=True)
    page.goto(f"{base}/admin/schedules/schedule/")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    shoot(page, "admin-schedules-phone", full_page=False)
    assert serious_violations(page) == []
    phone.close()


def test_the_change_page_shows_what_can_be_done_limits_and_revisions(browser, live_server, demo):
    base = live_server.url
    schedule = Schedule.objects.get(title="Weekly spend review (old USD 1 budget)")
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "admin", admin=True)
    page.goto(f"{base}/admin/schedules/schedule/{schedule.pk}/change/")
    assert page.locator("input[name=_save], input[name=_continue], a.deletelink").count() == 0
    assert page.get_by_role("link", name="Pin a revision").is_visible()
    limits = page.locator("table.limits-table").inner_text().lower()
    assert "cost\tusd 1.00\tnone" in limits and "synthesis reserve" in limits
    revisions = page.locator(".revisions .revision")
    assert revisions.first.locator(".revision__title").inner_text().startswith("Revision 2")
    assert "UTC" in revisions.first.locator(".revision__meta").first.inner_text()
    assert "Max cost (USD)" in revisions.first.locator("table.pin-diff").inner_text()
    assert page.locator("#footer").inner_text() == "Times in the admin are in UTC."
    shoot(page, "admin-schedule")
    assert serious_violations(page) == []

    page.goto(f"{base}/admin/schedules/schedule/{schedule.pk}/pin/")
    assert page.get_by_label("Max steps").get_attribute("placeholder") == "10"
    boxes = [
        page.get_by_label(label).bounding_box()
        for label in ("Max steps", "Max model calls", "Max cost (USD)")
    ]
    assert len({round(box["x"]) for box in boxes if box}) == 1  # the inputs line up
    assert serious_violations(page) == []
    context.close()

    # On a phone the change page and the pin form fit the screen: nothing to scroll sideways.
    phone = browser.new_context(viewport=PHONE, color_scheme="light", is_mobile=True)
    page = phone.new_page()
    sign_in(page, base, "admin", admin=True)
    for path in ("change", "pin"):
        page.goto(f"{base}/admin/schedules/schedule/{schedule.pk}/{path}/")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], path
    reserve = page.get_by_label("Synthesis reserve — cost (USD)").bounding_box()
    assert reserve is not None and reserve["x"] + reserve["width"] <= PHONE["width"]
    shoot(page, "admin-pin-phone")
    phone.close()
