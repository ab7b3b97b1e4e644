"""Foresight that tells the truth (docs/contract.md#forecast), in a real browser: the owner with a
USD 20 daily and a USD 250 monthly ceiling and a schedule firing every 2 minutes, on Dec 4, reads
on the budget page, the schedule's page and a proposal's card that the month stops at USD 250 on
Dec 16, that the daily ceiling stops runs on most days, and how many runs are refused, from which
schedule; on a laptop and a phone, with no serious or critical axe violation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine
from django.conf import settings
from django.test import Client

from accounting.models import OwnerBudget
from runs.models import Run
from schedules import proposals
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot
from tests.factories import answered_conversation, make_agent, make_assistant, make_schedule, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, reset_sequences=True)]

DEC_4 = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)  # 10:00 in Riga


def signed_in(browser, base: str, user, viewport):  # type: ignore[no-untyped-def]
    """A browser context carrying the user's session (a cookie without an expiry: the server's
    clock is moved to Dec 4, the browser's is not)."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport=viewport, color_scheme="light")
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base}])
    return context.new_page()


def test_every_page_says_the_month_stops_at_the_ceiling(browser, live_server):
    base = live_server.url
    with time_machine.travel(DEC_4, tick=True):
        owner = make_user("olga", tz="Europe/Riga")
        OwnerBudget.objects.filter(owner=owner).update(
            daily_ceiling=20, monthly_ceiling=250, chat_min_interval_minutes=1
        )
        pipeline = make_schedule(
            owner, make_agent("researcher"), title="Pipeline health check", cron="*/2 * * * *"
        )
        conversation = answered_conversation(owner, make_assistant(), "and a morning briefing")
        proposals.propose(
            Run.objects.get(conversation=conversation),
            {
                "title": "Morning briefing",
                "prompt": "Brief me.",
                "cron": "0 9 * * *",
                "timezone": "Europe/Riga",
            },
        )
        page = signed_in(browser, base, owner, LAPTOP)

        page.goto(f"{base}/budget/")
        ahead = page.locator("section[aria-labelledby=forecast-heading]")
        assert "At this pace you reach USD 250.00 on Dec 16" in ahead.locator(".forecast__words").inner_text()
        assert "stops runs on 12 of the 28 days left" in ahead.locator(".forecast__daily").inner_text()
        assert "would be refused admission" in ahead.locator(".forecast__stopped").inner_text()
        assert "Pipeline health check" in ahead.locator(".forecast__stopped-list").inner_text()
        assert (
            ahead.locator(".meter--forecast")
            .get_attribute("aria-label")
            .startswith("USD 0.00 spent, USD 250.00")
        )
        shoot(page, "budget-month-within-ceilings", readme=True)
        assert serious_violations(page) == []

        page.goto(f"{base}/schedules/{pipeline.pk}/")
        month = page.locator("section[aria-labelledby=month-heading]").inner_text()
        assert "about USD 250.00 by its end" in month and "would be refused admission" in month
        shoot(page, "schedule-month-within-ceilings")
        assert serious_violations(page) == []

        page.goto(f"{base}/conversations/{conversation.pk}/")
        card = page.locator(".schedule-card--proposal")
        words = card.inner_text()
        assert "27 of its 27 runs would be refused by your ceilings" in words
        assert "the monthly ceiling is reached on Dec 16 with or without it" in words
        card.scroll_into_view_if_needed()
        shoot(page, "proposal-card-within-ceilings", readme=True)
        assert serious_violations(page) == []

        phone = signed_in(browser, base, owner, PHONE)
        phone.goto(f"{base}/budget/")
        assert phone.locator(".forecast__daily").is_visible()
        shoot(phone, "budget-month-within-ceilings-phone")
        assert serious_violations(phone) == []
