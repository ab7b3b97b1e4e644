"""schedule.create pins a failure limit of 2, a cost of min(agent or USD 5, ceiling) and reserves of 2
steps, 2 model calls and USD 1, each kept only when strictly below its total (docs/decisions/0002)."""

from __future__ import annotations

import zoneinfo
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from accounting import ledger
from schedules.models import ScheduleRevision
from schedules.schemas import InvalidSchedule
from schedules.services import create_policy_limits
from tests.factories import make_agent, make_schedule

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("agent_cost", "ceiling", "agent_limits", "expected"),
    [
        pytest.param(
            None,
            None,
            {},
            {
                "max_cost": "5.00",
                "synthesis_reserve_cost": "1.00",
                "synthesis_reserve_steps": 2,
                "synthesis_reserve_model_calls": 2,
            },
            id="agent-without-finite-cost-gets-usd-5",
        ),
        pytest.param(
            "3.00",
            None,
            {},
            {"max_cost": "3.00", "synthesis_reserve_cost": "1.00", "synthesis_reserve_steps": 2},
            id="agent-at-usd-3",
        ),
        pytest.param(
            None,
            "0.80",
            {},
            {"max_cost": "0.80", "synthesis_reserve_cost": "0.00", "synthesis_reserve_steps": 2},
            id="ceiling-usd-0.80-omits-the-cost-reserve",
        ),
        pytest.param(
            None,
            "1.00",
            {},
            {"max_cost": "1.00", "synthesis_reserve_cost": "0.00"},
            id="ceiling-exactly-usd-1-omits-the-cost-reserve",
        ),
        pytest.param(
            None,
            None,
            {"max_steps": 2},
            {"max_steps": 2, "synthesis_reserve_steps": 0, "synthesis_reserve_model_calls": 2},
            id="max-steps-2-omits-the-step-reserve",
        ),
        pytest.param(
            "20.00",
            None,
            {},
            {"max_cost": "10.00", "synthesis_reserve_cost": "1.00"},
            id="agent-above-the-default-ceiling-is-capped-at-usd-10",
        ),
    ],
)
def test_schedule_create_policy(owner, agent_cost, ceiling, agent_limits, expected):
    if ceiling is not None:
        budget = ledger.budget_for(owner.pk)
        budget.schedule_cost_ceiling = Decimal(ceiling)
        budget.save()
    agent = make_agent(cost_limit=agent_cost, **agent_limits)

    schedule = make_schedule(owner, agent)

    revision = schedule.revision
    assert revision.number == 1
    assert revision.path == ScheduleRevision.Path.CREATE
    assert revision.max_consecutive_failures == 2
    assert revision.limits["synthesis_reserve_tool_calls"] == 0
    for field, value in expected.items():
        assert revision.limits[field] == value, field
    # The pinned value is always a valid RunLimits.
    assert revision.run_limits == create_policy_limits(agent, owner.pk)


def test_other_limits_come_from_the_agent_defaults(owner):
    agent = make_agent(max_steps=12, max_model_calls=14, max_tool_calls=7)
    limits = make_schedule(owner, agent).revision.limits
    assert (limits["max_steps"], limits["max_model_calls"], limits["max_tool_calls"]) == (12, 14, 7)


def test_a_one_time_schedule_uses_the_owners_time_zone_and_first_slot(owner, agent):
    when = timezone.now() + timedelta(hours=3)
    schedule = make_schedule(owner, agent, run_at=when)
    assert schedule.kind == "one_time"
    assert schedule.next_occurrence_at == when
    assert schedule.revision.timezone == "Europe/Riga"


def test_a_recurring_schedule_starts_at_its_next_local_slot(owner, agent):
    schedule = make_schedule(owner, agent, cron="daily at 09:00", tz="Europe/Riga")
    local = schedule.next_occurrence_at.astimezone(zoneinfo.ZoneInfo("Europe/Riga"))
    assert (local.hour, local.minute) == (9, 0)
    assert schedule.revision.cron == "0 9 * * *"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"cron": "61 9 * * *"}, "cron", "minute must be between 0 and 59"),
        ({"cron": "0 9 * *"}, "cron", "five fields"),
        ({"cron": "0 0 30 2 *"}, "cron", "never fires"),
        ({"timezone": "Mars/Olympus"}, "timezone", "not an IANA time zone"),
        ({"cron": None, "timezone": None, "run_at": "2020-01-01T09:00:00+00:00"}, "run_at", "in the future"),
        ({"cron": None, "timezone": None, "run_at": "2030-01-01T09:00:00"}, "run_at", "UTC offset"),
        ({"agent": "nobody"}, "agent", "no active agent named 'nobody'"),
        ({"prompt": "x" * 20_001}, "prompt", "at most 20000 characters"),
        ({"title": "  "}, "title", "non-empty"),
        ({"cron": None, "timezone": None}, "cron", "give run_at"),
        ({"run_at": "2030-01-01T09:00:00+00:00"}, "cron", "not both"),
        ({"timezone": None}, "timezone", "required with cron"),
        ({"max_cost": "9.00"}, "max_cost", "not a recognised field"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(owner, agent, change, field, words):
    from schedules.models import Schedule
    from schedules.schemas import parse_create
    from schedules.services import create_schedule

    data = {
        "title": "Briefing",
        "prompt": "Do research.",
        "agent": agent.name,
        "cron": "0 9 * * *",
        "timezone": "UTC",
    }
    data.update(change)
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(InvalidSchedule) as caught:
        create_schedule(owner, parse_create(data), via="test")
    assert field in caught.value.fields
    assert words in caught.value.fields[field]
    assert not Schedule.objects.exists()
    assert not ScheduleRevision.objects.exists()


def test_a_retired_agent_cannot_be_used(owner, agent):
    agent.is_active = False
    agent.save()
    with pytest.raises(InvalidSchedule) as caught:
        make_schedule(owner, agent)
    assert "agent" in caught.value.fields


def test_a_run_at_centuries_ahead_is_refused(owner, agent):
    from schedules.schemas import parse_create
    from schedules.services import create_schedule

    data = {"title": "Far", "prompt": "p", "agent": agent.name, "run_at": "9999-12-31T23:59:59-12:00"}
    with pytest.raises(InvalidSchedule) as caught:
        create_schedule(owner, parse_create(data), via="test")
    assert caught.value.fields == {"run_at": "run_at must be within the next 5 years"}
