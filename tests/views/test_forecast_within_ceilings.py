"""Foresight that tells the truth (docs/contract.md#forecast): an owner with a USD 20 daily and a
USD 250 monthly ceiling and one schedule firing every 2 minutes at USD 5.00 a run (no history), on
Dec 4, was told the month would cost USD 99,295 and the ceiling "would be reached on Dec 4".
Admission lets USD 20 a day through, so the month stops at USD 250, reached on Dec 16, and every
other run is refused: the budget page, the schedule's page and the proposal card all say so."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import pytest
import time_machine

from accounting.models import OwnerBudget
from runs.models import Run
from schedules import proposals
from tests.factories import answered_conversation, make_assistant, make_schedule

pytestmark = pytest.mark.django_db

DEC_4 = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)  # 10:00 in Riga
DUE = 419 + 27 * 720  # 10:02 to 23:58 on Dec 4, then 720 a day to the 31st
RUN = 50  # USD 20 (four runs) a day from Dec 4 to 15, two more on Dec 16
REFUSED = DUE - RUN


def _text(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(page)).split())


@pytest.fixture
def tight(owner):
    OwnerBudget.objects.filter(owner=owner).update(
        daily_ceiling=20, monthly_ceiling=250, chat_min_interval_minutes=1
    )
    return owner


@pytest.fixture
def pipeline(tight, agent):
    with time_machine.travel(DEC_4, tick=False):
        return make_schedule(tight, agent, title="Pipeline health check", cron="*/2 * * * *")


@time_machine.travel(DEC_4, tick=False)
def test_the_budget_page_says_the_month_stops_at_250_on_dec_16(owner_client, pipeline):
    text = _text(owner_client.get("/budget/").text)

    assert "At this pace you reach USD 250.00 on Dec 16" in text
    assert "so the month stops at about USD 250.00" in text
    assert "Your daily ceiling of USD 20.00 stops runs on 12 of the 28 days left" in text
    assert f"Of the {DUE:,} runs due to the month\u2019s end, about {RUN} would run" in text
    assert f"{REFUSED:,} would be refused admission by your ceilings" in text
    assert f"Pipeline health check : {REFUSED:,} runs refused" in text
    assert "Expected by month end USD 250.00" in text and "Worst case USD 250.00" in text
    assert "99,295" not in text


@time_machine.travel(DEC_4, tick=False)
def test_the_schedule_page_says_the_same(owner_client, pipeline):
    text = _text(owner_client.get(f"/schedules/{pipeline.pk}/").text)

    assert f"{DUE:,} runs left this month: about USD 250.00 by its end, USD 250.00 at worst." in text
    assert f"About {REFUSED:,} of them would be refused admission" in text


@time_machine.travel(DEC_4, tick=False)
def test_the_proposal_card_says_what_the_schedule_would_do_to_the_month(tight, owner_client, agent):
    conversation = answered_conversation(tight, make_assistant(), "watch the pipeline")
    run = Run.objects.get(conversation=conversation)
    proposals.propose(
        run,
        {
            "title": "Pipeline health check",
            "prompt": "Check it.",
            "cron": "*/2 * * * *",
            "timezone": "Europe/Riga",
        },
    )

    text = _text(owner_client.get(f"/conversations/{conversation.pk}/").text)

    assert "Forecast this month USD 250.00 expected · USD 250.00 at worst" in text
    assert f"{REFUSED:,} of its {DUE:,} runs would be refused by your ceilings" in text
    assert "This month: USD 0.00 expected → becomes USD 250.00 with it, of USD 250.00 ceiling" in text
    assert "with it the monthly ceiling is reached on Dec 16 instead of never" in text
    assert f"about {REFUSED:,} runs would be refused" in text


@time_machine.travel(DEC_4, tick=False)
def test_the_card_of_another_proposal_counts_the_runs_it_takes_from_the_others(
    tight, owner_client, agent, pipeline
):
    conversation = answered_conversation(tight, make_assistant(), "a briefing too")
    run = Run.objects.get(conversation=conversation)
    proposals.propose(
        run, {"title": "Briefing", "prompt": "Brief me.", "cron": "0 9 * * *", "timezone": "Europe/Riga"}
    )

    text = _text(owner_client.get(f"/conversations/{conversation.pk}/").text)

    # The pipeline's runs from midnight fill each day before 09:00: the briefing would never run,
    # and the month's ceiling is reached on Dec 16 with or without it.
    assert "Forecast this month USD 0.00 expected · USD 0.00 at worst" in text
    assert "27 of its 27 runs would be refused by your ceilings" in text
    assert "the monthly ceiling is reached on Dec 16 with or without it" in text
    assert "about 27 runs would be refused" in text
