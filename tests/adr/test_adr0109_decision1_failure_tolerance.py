"""docs/decisions/0002, point 1: schedule.create pins max_consecutive_failures = 2. One failed occurrence
is tolerated; the second consecutive failure pauses the schedule. Counting, reset and the failure-limit
pause are unchanged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import make_agent, make_schedule, run_due

pytestmark = pytest.mark.django_db


def test_a_daily_briefing_pauses_on_its_second_consecutive_failure_not_its_first(owner):
    briefing = make_schedule(owner, make_agent(model="sim-overloaded"), cron="0 9 * * *", tz="Europe/Riga")
    assert briefing.revision.max_consecutive_failures == 2

    first = run_due(briefing)
    assert first.status == "failed"
    assert (briefing.status, briefing.consecutive_failures) == ("active", 1)

    second = run_due(briefing)
    assert (briefing.status, briefing.consecutive_failures) == ("paused", 2)
    assert briefing.pause.reason == "failure_limit"
    assert briefing.pause.run_id == second.pk


def test_a_completed_run_in_between_resets_the_count(owner):
    agent = make_agent(model="sim-overloaded")
    briefing = make_schedule(owner, agent)
    run_due(briefing)
    agent.model = "sim-research"  # the provider recovered
    agent.save()
    assert run_due(briefing).status == "completed"
    assert briefing.consecutive_failures == 0
    agent.model = "sim-overloaded"
    agent.save()
    run_due(briefing)
    assert (briefing.status, briefing.consecutive_failures) == ("active", 1)


def test_a_one_time_reminder_completes_after_its_only_occurrence_even_when_it_fails(owner):
    reminder = make_schedule(
        owner, make_agent(model="sim-quota"), run_at=timezone.now() + timedelta(minutes=10)
    )
    run = run_due(reminder)
    assert run.status == "failed"
    assert reminder.status == "completed"
    assert reminder.consecutive_failures == 1
