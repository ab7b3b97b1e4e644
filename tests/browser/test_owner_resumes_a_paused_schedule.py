"""Scenario 1: the demo owner signs in, opens a schedule paused after classified failures, reads
why, resumes it, and sees the panel swapped in place with the count kept and said in words."""

from __future__ import annotations

import pytest

from schedules.models import PauseEvent, Schedule
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, reset_sequences=True)]

SENTENCE = (
    "The failure count stays at 2 of 2: if the next run fails, the schedule pauses again; "
    "a completed run resets it."
)
PAUSED_TITLE = "Anthropic news briefing"


def test_the_owner_understands_the_pause_and_resumes_keeping_the_count(browser, live_server, demo):
    base = live_server.url
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "owner")

    # The list: paused first, each with its classification.
    assert page.locator("h1").inner_text() == "Schedules"
    first_row = page.locator("tbody tr").first
    assert "Paused" in first_row.inner_text()
    row = page.locator("tr", has_text=PAUSED_TITLE)
    assert "2 of 2 failures" in row.inner_text()
    assert "The AI provider was overloaded — usually temporary." in row.inner_text()
    assert "provider error 529 overloaded_error" in row.inner_text()
    shoot(page, "schedules-list", readme=True)
    assert serious_violations(page) == []

    # The paused schedule: when, then what happened in plain words, the codes in a quieter line.
    row.get_by_role("link", name=PAUSED_TITLE).click()
    page.wait_for_load_state()
    explanation = page.locator("#status .explanation").inner_text()
    assert explanation.endswith("after 2 consecutive failed runs.")
    assert (
        "The AI provider was overloaded — usually temporary."
        in page.locator("#status .failure__what").inner_text()
    )
    assert "HTTP 529 · overloaded_error" in page.locator("#status .failure__ids").inner_text()
    assert page.locator("#status .advice").inner_text() == "Resuming should help."
    assert page.locator("#status .action__note").inner_text() == SENTENCE
    events = page.locator("#events tbody tr")
    assert events.count() == 2
    assert "The AI provider was overloaded — usually temporary." in events.first.inner_text()
    shoot(page, "schedule-paused", readme=True)
    assert serious_violations(page) == []

    # Resume: the confirmation says what happens to the count; the panel swaps without a reload.
    page.evaluate("window.__before_resume = 'still here'")
    dialogs: list[str] = []

    def accept(dialog):  # type: ignore[no-untyped-def]
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.get_by_role("button", name="Resume").click()
    notice = page.locator("#status .notice")
    notice.wait_for()
    assert dialogs == [SENTENCE]
    assert notice.inner_text() == f"Resumed. {SENTENCE}"
    assert page.evaluate("window.__before_resume") == "still here"
    # One state, in a warning tone: active, with the kept count; no green badge beside a red count.
    assert " ".join(page.locator("#status .badge").inner_text().split()) == "Active · 2 of 2 failures kept"
    assert "badge--warn" in (page.locator("#status .badge").get_attribute("class") or "")
    assert page.locator("#status .streak").count() == 0
    shoot(page, "schedule-resumed")

    schedule = Schedule.objects.get(title=PAUSED_TITLE)
    assert schedule.status == Schedule.Status.ACTIVE and schedule.consecutive_failures == 2
    assert PauseEvent.objects.filter(schedule=schedule, action="resume").count() == 1

    # The run page of the last failure: classification, diagnostics, message, bars.
    page.locator("#events tbody tr").first.get_by_role("link").click()
    page.wait_for_load_state()
    failure = page.locator(".card--failure").inner_text()
    assert "The AI provider was overloaded — usually temporary." in failure
    assert "provider error · transient · HTTP 529 · overloaded_error · simulated" in failure
    assert page.locator(".bar").count() == 4
    assert serious_violations(page) == []

    # A run that completed through its synthesis reserve, for the README.
    page.goto(f"{base}/")
    page.get_by_role("link", name="Market research digest (completes through its reserve)").click()
    page.locator("#occurrences-heading ~ .table-wrap tbody tr").first.get_by_role("link").click()
    page.wait_for_load_state()
    assert page.locator(".bar--activated").count() == 1
    shoot(page, "run-detail", readme=True)

    page.goto(f"{base}/budget/")
    assert page.locator("svg.chart rect").count() >= 1
    shoot(page, "budget", readme=True)
    assert serious_violations(page) == []

    page.goto(f"{base}/conversations/")
    assert serious_violations(page) == []

    # The new-schedule form: the live preview follows the chosen agent, without a reload.
    page.goto(f"{base}/schedules/new/")
    page.evaluate("window.__form_marker = 1")
    page.get_by_label("Agent").select_option("sim-expensive")
    page.locator("#limits-preview strong", has_text="sim-expensive").wait_for()
    assert page.evaluate("window.__form_marker") == 1
    shoot(page, "new-schedule")
    assert serious_violations(page) == []

    # Settings: the pause notices, with the demo's emails sent when its schedules paused.
    page.goto(f"{base}/settings/")
    assert "Pause notifications" in page.locator("h2").first.inner_text()
    page.get_by_label("Webhook URL").fill(f"{base}/simulator/webhook/")
    page.get_by_label("POST a signed JSON notice to a webhook").check()
    page.get_by_role("button", name="Save", exact=True).click()
    assert page.locator(".secret").inner_text().startswith("whsec_")
    page.get_by_role("button", name="Send a test notification").click()
    assert "Test webhook: delivered (HTTP 204)." in page.locator("#messages").inner_text()
    shoot(page, "settings")
    assert serious_violations(page) == []

    # Keyboard focus is visible.
    page.goto(f"{base}/")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    outline = page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth]; })()"
    )
    assert outline[0] != "none" and outline[1] != "0px"
    context.close()


def test_the_pages_read_on_a_phone_and_in_the_dark(browser, live_server, demo):
    base = live_server.url
    context = browser.new_context(viewport=PHONE, color_scheme="dark", is_mobile=True)
    page = context.new_page()
    sign_in(page, base, "owner")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    schedule = Schedule.objects.get(title=PAUSED_TITLE)
    page.goto(f"{base}/schedules/{schedule.pk}/")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.get_by_role("button", name="Resume").is_visible()
    shoot(page, "schedule-paused-phone-dark", full_page=False)
    assert serious_violations(page) == []
    context.close()

    light = browser.new_context(viewport=PHONE, color_scheme="light", is_mobile=True)
    page = light.new_page()
    sign_in(page, base, "owner")
    page.goto(f"{base}/schedules/{schedule.pk}/")
    shoot(page, "schedule-paused-phone", readme=True, full_page=False)
    light.close()
