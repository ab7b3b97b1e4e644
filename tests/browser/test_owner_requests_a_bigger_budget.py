"""Scenario 3: a schedule paused because its runs cost more than its budget. The owner reads that
Resume will not help, with the figures, asks for a bigger budget (prefilled from the runs and
replayed against them), an admin pins it from the request after reviewing the same replay, the
owner is told and sees it pinned, resumes, and the next run uses the new limits."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.core import mail

from runs.models import Run
from schedules import tasks
from schedules.models import RevisionRequest, Schedule, ScheduleRevision
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot, sign_in
from tests.factories import run_due

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, reset_sequences=True)]

TITLE = "Weekly spend review (old USD 1 budget)"
REASON = (
    "Each weekly review uses its whole USD 1.00 and stops before answering; "
    "USD 2 with a USD 1 reserve lets it finish."
)


def test_the_owner_asks_an_admin_pins_from_the_request_and_the_next_run_uses_it(browser, live_server, demo):
    base = live_server.url
    schedule = Schedule.objects.get(title=TITLE)
    owner = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = owner.new_page()
    sign_in(page, base, "owner")

    # The panel: what happened in words, and that Resume will not help, with the figures.
    page.goto(f"{base}/schedules/{schedule.pk}/")
    panel = page.locator("#status")
    assert "The run used its whole USD 1.00 budget before answering." in panel.inner_text()
    advice = panel.locator(".advice").inner_text()
    assert re.match(
        r"Resuming will not help: the last 2 runs cost USD 0\.99\d* and USD 0\.99\d* and ran out", advice
    )
    ask = panel.get_by_role("link", name="Request a bigger budget")
    assert "button--primary" in (ask.get_attribute("class") or "")
    assert "button--primary" not in (panel.get_by_role("button", name="Resume").get_attribute("class") or "")
    shoot(page, "schedule-budget-advice", readme=True)
    assert serious_violations(page) == []

    # The request: prefilled from the runs, replayed against them; other values replay live.
    ask.click()
    page.wait_for_load_state()
    assert page.get_by_label("Max cost (USD)").input_value() == "3.00"
    assert page.get_by_label("Synthesis reserve — cost (USD)").input_value() == "1.00"
    assert page.get_by_label("Max cost (USD)").get_attribute("placeholder") == "1.00"
    replay = page.locator("#replay")
    assert "An estimate" in replay.locator(".estimate").inner_text()
    assert replay.locator("tbody tr").count() == 2
    assert "none would run out" in replay.inner_text()
    page.evaluate("window.__request_marker = 1")
    page.get_by_label("Synthesis reserve — cost (USD)").fill("0")
    page.get_by_label("Max cost (USD)").fill("1.10")
    page.locator("#replay", has_text="Runs out of cost before step 3").wait_for()
    assert page.evaluate("window.__request_marker") == 1  # swapped in place, no reload
    page.get_by_label("Max cost (USD)").fill("2.00")
    page.get_by_label("Synthesis reserve — cost (USD)").fill("1.00")
    page.locator(
        "#replay", has_text="Told to write its answer at step 3: the cost reserve is reached."
    ).wait_for()
    page.get_by_label("Why these limits").fill(REASON)
    shoot(page, "request-limits", readme=True)
    assert serious_violations(page) == []
    page.get_by_role("button", name="Send the request").click()
    page.wait_for_load_state()
    assert "Request sent." in page.locator("#messages").inner_text()
    requests = page.locator("#requests")
    assert "Open" in requests.locator(".badge").first.inner_text()
    assert "is waiting for an admin" in page.locator("#status .advice").inner_text()
    asked = RevisionRequest.objects.get(schedule=schedule)
    assert (asked.state, asked.limits["max_cost"], asked.reason) == ("open", "2.00", REASON)

    # The admin: the queue, the request, the pin form prefilled from it, the review with the replay.
    admin = browser.new_context(viewport=LAPTOP, color_scheme="light")
    desk = admin.new_page()
    sign_in(desk, base, "admin", admin=True)
    desk.goto(f"{base}/admin/schedules/revisionrequest/")
    assert desk.locator("#result_list tbody tr").count() == 1
    shoot(desk, "admin-revision-requests")
    assert serious_violations(desk) == []
    desk.locator("#result_list tbody tr").first.get_by_role("link").first.click()
    desk.wait_for_load_state()
    assert serious_violations(desk) == []
    desk.get_by_role("link", name="Review and pin").click()
    desk.wait_for_load_state()
    assert desk.get_by_label("Max cost (USD)").input_value() == "2.00"
    assert desk.get_by_label("Max cost (USD)").get_attribute("placeholder") == "1.00"
    assert "Answering the request of owner" in desk.locator(".request-note").inner_text()
    assert serious_violations(desk) == []
    desk.get_by_role("button", name="Review the change").click()
    desk.wait_for_load_state()
    assert "Max cost (USD)" in desk.locator("table.pin-diff").inner_text()
    assert "Told to write its answer at step 3" in desk.locator("table.replay-table").inner_text()
    shoot(desk, "pin-from-request", readme=True)
    assert serious_violations(desk) == []
    desk.get_by_role("button", name="Confirm and pin the revision").click()
    desk.wait_for_load_state()
    assert "answering the request of" in desk.locator(".messagelist").inner_text()
    revision = ScheduleRevision.objects.get(schedule=schedule, request=asked)
    assert revision.number == 3 and revision.limits["max_cost"] == "2.00"
    admin.close()

    # The owner is told (the minute task), sees it pinned, and resumes.
    tasks.notify()
    assert [m.subject for m in mail.outbox if "pinned" in m.subject] == [f"New limits pinned: {TITLE}"]
    page.goto(f"{base}/schedules/{schedule.pk}/")
    assert "Pinned as revision 3 by admin" in page.locator("#requests").inner_text()
    assert page.locator("#status .advice").inner_text().startswith("The limits were raised since: revision 3")
    assert "Answers the request of" in page.locator(".timeline__item").first.inner_text()
    shoot(page, "schedule-request-pinned")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resume").click()
    page.locator("#status .notice").wait_for()
    owner.close()

    # The next run copies the new limits and answers from its reserve.
    run = run_due(schedule)
    assert run is not None
    run = Run.objects.get(pk=run.pk)
    assert run.run_limits.max_cost == Decimal("2.00")
    assert (run.status, run.synthesis_dimension) == ("completed", "cost")


def test_the_request_page_reads_on_a_phone(browser, live_server, demo):
    base = live_server.url
    schedule = Schedule.objects.get(title=TITLE)
    context = browser.new_context(viewport=PHONE, color_scheme="light", is_mobile=True)
    page = context.new_page()
    sign_in(page, base, "owner")
    page.goto(f"{base}/schedules/{schedule.pk}/request-limits/")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.get_by_label("Max cost (USD)").is_visible()
    shoot(page, "request-limits-phone")
    assert serious_violations(page) == []
    page.goto(f"{base}/schedules/{schedule.pk}/")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.get_by_role("link", name="Request a bigger budget").is_visible()
    shoot(page, "schedule-budget-advice-phone", full_page=False)
    assert serious_violations(page) == []
    context.close()


def test_without_javascript_resume_asks_first_and_answers_in_the_panel(browser, live_server, demo):
    base = live_server.url
    schedule = Schedule.objects.get(title="Anthropic news briefing")
    context = browser.new_context(viewport=LAPTOP, color_scheme="light", java_script_enabled=False)
    page = context.new_page()
    sign_in(page, base, "owner")
    page.goto(f"{base}/schedules/{schedule.pk}/")
    page.get_by_role("button", name="Resume").click()
    page.wait_for_load_state()
    step = page.locator("#status .confirm-step")
    assert "The failure count stays at 2 of 2" in step.inner_text()
    shoot(page, "resume-confirm-no-js", full_page=False)
    assert Schedule.objects.get(pk=schedule.pk).status == Schedule.Status.PAUSED
    step.get_by_role("button", name="Yes, resume").click()
    page.wait_for_load_state()
    assert (
        page.locator("#status .notice").inner_text().startswith("Resumed. The failure count stays at 2 of 2")
    )
    assert page.locator("#messages .message").count() == 0  # the confirmation is in the panel only
    assert Schedule.objects.get(pk=schedule.pk).status == Schedule.Status.ACTIVE
    context.close()
