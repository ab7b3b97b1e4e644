"""Foresight that tells the truth, over the API (docs/contract.md#forecast): the USD 20 / USD 250
owner with one schedule every 2 minutes at USD 5.00 a run, on Dec 4, is told the month stops at
USD 250 on Dec 16 by GET /budget, GET /schedules/{id} and the proposal in GET /conversations/{id},
each answer checked against the served schema (tests/api/contract.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from accounting.models import OwnerBudget
from runs.models import Run
from schedules import proposals
from tests.factories import answered_conversation, make_assistant, make_schedule

pytestmark = pytest.mark.django_db

DEC_4 = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)  # 10:00 in Riga
DUE = 419 + 27 * 720
RUNS = {"due": DUE, "run": 50, "refused": DUE - 50, "skipped": 0}


@pytest.fixture
def tight(owner):
    OwnerBudget.objects.filter(owner=owner).update(
        daily_ceiling=20, monthly_ceiling=250, chat_min_interval_minutes=1
    )
    return owner


@time_machine.travel(DEC_4, tick=False)
def test_the_budget_and_the_schedule_say_the_month_stops_at_250_on_dec_16(tight, agent, owner_api):
    schedule = make_schedule(tight, agent, title="Pipeline health check", cron="*/2 * * * *")

    forecast = owner_api.get("/budget").json()["forecast"]
    month = owner_api.get(f"/schedules/{schedule.pk}").json()["month"]

    assert forecast == {
        "month_expected": "250.00",
        "month_worst": "250.00",
        "ceiling_reached_on": "2026-12-16",
        "worst_ceiling_reached_on": "2026-12-16",
        "days_left": 28,
        "daily_ceiling_days": 12,
        "worst_daily_ceiling_days": 12,
        "runs": RUNS,
        "worst_runs": RUNS,
        "stopped": [
            {"schedule_id": schedule.pk, "title": "Pipeline health check", "refused": DUE - 50, "skipped": 0}
        ],
        "stopped_schedules": 1,
    }
    assert month == {
        "spent": "0.00",
        "expected": "250.00",
        "worst": "250.00",
        "monthly_cap": None,
        "runs": RUNS,
        "worst_runs": RUNS,
    }


@time_machine.travel(DEC_4, tick=False)
def test_the_proposal_says_what_it_would_do_to_the_month(tight, agent, owner_api):
    conversation = answered_conversation(tight, make_assistant(), "watch the pipeline")
    proposals.propose(
        Run.objects.get(conversation=conversation),
        {
            "title": "Pipeline health check",
            "prompt": "Check it.",
            "cron": "*/2 * * * *",
            "timezone": "Europe/Riga",
        },
    )

    (proposal,) = owner_api.get(f"/conversations/{conversation.pk}").json()["proposals"]

    assert proposal["forecast"] == {
        "expected": "250.00",
        "worst": "250.00",
        "runs": RUNS,
        "month": {
            "expected": "0.00",
            "expected_with": "250.00",
            "worst_with": "250.00",
            "ceiling_reached_on": None,
            "ceiling_reached_on_with": "2026-12-16",
            "stopped": 0,
            "stopped_with": DUE - 50,
        },
    }
