from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.failures import BudgetExhausted, Diagnostics, ProviderTransientError
from runs.models import Agent, Run
from schedules.models import Schedule
from tests.factories import fail, make_schedule, materialize, spend


def overloaded() -> ProviderTransientError:
    return ProviderTransientError(
        "Overloaded: the prompt said 'secret plans'",
        diagnostics=Diagnostics(provider="anthropic", provider_code="overloaded_error", http_status=529),
    )


def spend_on(run: Run, cost: str, *, schedule_id: int | None) -> None:
    spend(run.owner_id, cost, run_id=run.pk, schedule_id=schedule_id, tokens=(1000, 500))


@pytest.fixture
def paused_after_two_failures(owner: User, agent: Agent) -> Schedule:
    """Paused by the failure limit: budget exhausted (cost), then a transient 529."""
    schedule = make_schedule(owner, agent, title="Morning briefing")
    first = fail(materialize(schedule), BudgetExhausted("The cost limit is used up.", dimension="cost"))
    spend_on(first, "0.60", schedule_id=schedule.pk)
    fail(materialize(schedule), overloaded())
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.PAUSED
    return schedule


@pytest.fixture
def other_client(other_owner: User) -> Client:
    client = Client()
    client.force_login(other_owner)
    return client


@pytest.fixture
def csrf_client(owner: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    return client


HTMX = {"HX-Request": "true"}
