"""Scenario: the owner asks the assistant for a weekday briefing. A real `manage.py qcluster`
answers the message; the page shows the steps and then the schedule card with the policy's
values, without a reload; the schedule's revision history says it came from chat and links back;
then a USD 20 budget is asked for and the refusal is shown with what to do instead."""

from __future__ import annotations

import re

import pytest

from runs.models import Run
from schedules.models import Schedule
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot, sign_in
from tests.factories import PASSWORD, chat_creates_at_once, make_agent, make_assistant, make_user
from tests.scheduler.conftest import process_env, read_log, spawn  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, reset_sequences=True),
]


def test_the_owner_creates_a_schedule_in_chat_and_is_refused_a_bigger_budget(browser, live_server, spawn):  # noqa: F811
    owner = make_user("olga", tz="Europe/Riga")
    chat_creates_at_once(owner)  # confirming a proposal first: test_owner_confirms_a_proposed_schedule.py
    make_assistant()
    cluster = spawn("qcluster")
    base = live_server.url
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "olga", password=PASSWORD)

    page.goto(f"{base}/conversations/")
    assert "No conversations" in page.locator("main").inner_text()
    page.get_by_role("link", name="New conversation").first.click()
    page.wait_for_load_state()
    page.get_by_label("Message").fill("every weekday at 7:30 brief me on AI news")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(re.compile(r"/conversations/\d+/$"))
    page.evaluate("window.__still_this_page = true")

    # The worker answers; the polled tail shows the steps, then the answer and the card.
    card = page.locator(".schedule-card")
    done = page.locator("#tail .bubble--assistant .badge", has_text="Completed")
    try:
        # The card shows once the tool made the schedule; the tool's step says so once the run's
        # next step records its result (its answer, here): both are on the page when it completed.
        card.wait_for(timeout=60_000)
        done.wait_for(timeout=60_000)
    except Exception:
        raise AssertionError(read_log(cluster)) from None
    assert page.evaluate("window.__still_this_page") is True  # no reload: htmx polling swapped it in
    steps = page.locator("#tail .step").all_inner_texts()
    assert len(steps) == 2
    assert "clock.now" in steps[0] and "Europe/Riga" in steps[0]
    assert "schedule.create" in steps[1] and "Created schedule" in steps[1]
    assert "Completed" in page.locator("#tail .bubble--assistant .badge").first.inner_text()
    facts = card.inner_text()
    assert "AI news briefing" in facts and "Weekdays at 07:30, Europe/Riga" in facts
    assert "Budget per run\nUSD 5.00" in facts
    assert "Reserves\n2 steps / 2 model calls / USD 1.00" in facts
    assert "Failure limit\n2 failed runs in a row pause it" in facts
    assert page.locator("#send-button").is_enabled()  # the final poll turned Send back on
    run = Run.objects.get(owner=owner)
    assert run.status == "completed" and run.started_at is not None
    shoot(page, "conversation-schedule-created", readme=True)
    assert serious_violations(page) == []

    # The schedule page: revision 1, schedule.create via chat, linking back here.
    conversation_url = page.url
    card.get_by_role("link", name="AI news briefing").click()
    page.wait_for_load_state()
    history = page.locator("#revisions-heading ~ .timeline").inner_text()
    assert "Revision 1 ·" in history and "schedule.create via chat" in history
    page.get_by_role("link", name="In the conversation where it was asked for").click()
    page.wait_for_load_state()
    assert page.url.startswith(conversation_url)

    # A bigger budget: schedule.update refuses, and the page says what to do instead.
    schedule = Schedule.objects.get(owner=owner)
    page.get_by_label("Message").fill(f"give schedule {schedule.pk} a USD 20 budget")
    page.get_by_role("button", name="Send").click()
    refusal = page.locator("#tail .refusal")
    refusal.wait_for(timeout=60_000)
    text = refusal.inner_text()
    assert "Refused: a schedule\u2019s limits cannot be changed in chat." in text
    assert "What to do instead: ask an admin to pin an explicit revision" in text
    assert (
        f"I cannot give schedule {schedule.pk} a USD 20.00 budget"
        in page.locator("#tail .answer").inner_text()
    )
    assert page.locator("#thread .schedule-card").count() == 1  # the first exchange moved up, card and all
    assert page.locator("#composer textarea").input_value() == ""
    schedule.refresh_from_db()
    assert schedule.revision.number == 1 and schedule.revision.limits["max_cost"] == "5.00"
    shoot(page, "conversation-refusal")
    assert serious_violations(page) == []
    context.close()

    phone = browser.new_context(viewport=PHONE, color_scheme="light", is_mobile=True)
    page = phone.new_page()
    sign_in(page, base, "olga", password=PASSWORD)
    page.goto(conversation_url)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.locator(".schedule-card").first.scroll_into_view_if_needed()
    shoot(page, "conversation-phone", full_page=False)
    assert serious_violations(page) == []
    phone.close()


def test_stop_cancels_a_slow_answer_without_javascript(browser, live_server, spawn):  # noqa: F811
    """With JavaScript off every control still works: the form posts, Stop posts, a refresh shows
    the run's state."""
    owner = make_user("olga", tz="Europe/Riga")
    make_agent("slowpoke", model="sim-slow")
    spawn("qcluster")
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    page = context.new_page()
    sign_in(page, live_server.url, "olga", password=PASSWORD)
    page.goto(f"{live_server.url}/conversations/new/")
    page.get_by_label("Agent").select_option("slowpoke")
    page.get_by_label("Message").fill("Take your time: delay=30")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(re.compile(r"/conversations/\d+/$"))
    assert "Refresh the page to see its progress" in page.locator("main").inner_text()
    page.get_by_role("button", name="Stop").click()
    page.wait_for_load_state()
    assert "Stopped before it answered." in page.locator("main").inner_text()
    run = Run.objects.get(owner=owner)
    assert (run.status, run.failure_reason) == ("cancelled", "")
    context.close()
