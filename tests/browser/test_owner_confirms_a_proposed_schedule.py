"""Scenario (docs/contract.md#confirm-before-chat-creates-a-schedule): the owner asks the assistant for
a weekday briefing. A real `manage.py qcluster` answers; the assistant only proposes it, and the
conversation shows the proposal's card (cadence, next runs, agent, limits, forecast and what it does
to the month) with Confirm and Decline. Nothing exists until the owner confirms; then the card links
to the new schedule, whose revision history says it came from chat."""

from __future__ import annotations

import re

import pytest

from schedules.models import Proposal, Schedule
from tests.browser.conftest import LAPTOP, serious_violations, shoot, sign_in
from tests.factories import PASSWORD, make_assistant, make_user
from tests.scheduler.conftest import process_env, read_log, spawn  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, reset_sequences=True),
]


def test_the_owner_confirms_the_schedule_the_assistant_proposed(browser, live_server, spawn):  # noqa: F811
    owner = make_user("olga", tz="Europe/Riga")
    make_assistant()
    cluster = spawn("qcluster")
    base = live_server.url
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "olga", password=PASSWORD)

    page.goto(f"{base}/conversations/new/")
    page.get_by_label("Message").fill("every weekday at 7:30 brief me on AI news")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(re.compile(r"/conversations/\d+/$"))

    # The worker answers; the polled tail shows the proposal's card.
    card = page.locator("#tail .schedule-card--proposal")
    try:
        card.wait_for(timeout=60_000)
    except Exception:
        raise AssertionError(read_log(cluster)) from None
    assert "I propose a schedule “AI news briefing”" in page.locator("#tail .answer").inner_text()
    facts = card.inner_text()
    assert "AI news briefing" in facts
    assert re.sub(r"\s+", " ", card.locator(".badge").inner_text()) == "Open · waiting for you"
    assert "When\nWeekdays at 07:30, Europe/Riga" in facts
    fires = card.locator("dt:text('Next runs') + dd time").all_inner_texts()
    assert len(fires) == 3 and all(fire.endswith(("07:30 EET", "07:30 EEST")) for fire in fires)
    assert "Agent\nsim-assistant (sim-assistant)" in facts
    assert "Failure limit\n2 failed runs in a row pause it" in facts
    assert "Monthly cap\nnone" in facts
    assert re.search(r"Forecast this month\nUSD [\d,]+\.\d\d expected · USD [\d,]+\.\d\d at worst", facts)
    month = r"This month: USD [\d,.]+ expected →\s*(?:becomes\s*)?USD [\d,.]+ with it, of USD 250\.00 ceiling"
    assert re.search(month, facts), facts
    assert not Schedule.objects.exists()  # nothing until the owner says so
    card.locator("summary").click()  # the limits the policy pins
    assert card.locator("table.limits").is_visible()
    shoot(page, "proposal-card", readme=True)
    assert serious_violations(page) == []

    page.evaluate("window.__still_this_page = true")
    card.get_by_role("button", name="Confirm").click()
    created = page.locator(".schedule-card--confirmed")
    created.wait_for(timeout=10_000)
    assert page.evaluate("window.__still_this_page") is True  # htmx swapped the card in place
    assert "Created “AI news briefing”: it is on your schedules." in created.inner_text()
    assert created.get_by_role("button", name="Confirm").count() == 0
    schedule = Schedule.objects.get(owner=owner)
    assert Proposal.objects.get().schedule_id == schedule.pk

    created.get_by_role("link", name="AI news briefing").click()
    page.wait_for_load_state()
    assert page.url == f"{base}/schedules/{schedule.pk}/"
    assert "AI news briefing" in page.locator("h1").inner_text()
    history = page.locator("#revisions-heading ~ .timeline").inner_text()
    assert "Revision 1 ·" in history and "schedule.create via chat" in history
    context.close()
