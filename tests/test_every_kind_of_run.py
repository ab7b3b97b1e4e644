"""Every kind of run the product creates, read through every surface that shows runs.

A delegated child's max_cost is what its parent had left, to the micro-dollar ("1.799859"); the
API once rebuilt stored limits with the rule for amounts people type (two decimals) and answered
500 for any run or conversation that held one. Stored values are read as stored everywhere
(RunLimits.from_json, the one reader): here each kind is read back by the API's run and
conversation, the dashboard's run and conversation pages, the schedule page and the admin.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from accounting.models import OwnerBudget
from runs.models import Run
from runs.runtime import execute_run
from runs.services import cancel_run, claim_run
from tests.api.conftest import Api, token_for
from tests.factories import fail, finish, make_schedule, materialize, running_run, start_interactive_run
from tests.runs.wire import OPENAI, Provider, make_wire_agent

pytestmark = pytest.mark.django_db


def _delegating_run(owner) -> Run:
    """A parent that spent some of its budget on a call, then delegated: its child's max_cost is
    the parent's remaining dollars, with six decimal places."""
    task = "Collect supporting evidence."

    def reply(request):
        body = request.content.decode()
        if task in body and "agent_delegate" not in body.split(task)[0][-200:]:
            return OPENAI.answer("Evidence: two sources agree.", usage=(1234, 57))
        return OPENAI.tools(("agent_delegate", {"task": task}), usage=(987, 31))

    agent = make_wire_agent(OPENAI, tools=["agent.delegate"], input_price="3.00", output_price="15.00")
    run = start_interactive_run(owner.pk, agent, "Write the briefing.")
    claim_run(run)
    provider = Provider(reply, OPENAI.answer("Done.", usage=(2000, 100)))
    with provider.client() as client:
        return execute_run(run, client=client, sleep=lambda seconds: None)


@pytest.fixture
def runs(owner, agent) -> dict[str, Run]:
    parent = _delegating_run(owner)
    child = Run.objects.get(parent=parent)
    schedule = make_schedule(owner, agent)
    cancelled = running_run(owner, agent)
    cancel_run(cancelled)
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=Decimal("1.00"))
    refused = start_interactive_run(owner.pk, agent, "Too dear today")
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=None)
    assert refused.failure_reason == "admission_denied"
    return {
        "interactive, refused admission": refused,
        "delegated": child,
        "its parent": parent,
        "scheduled, completed": finish(materialize(schedule)),
        "scheduled, failed": fail(materialize(schedule)),
        "scheduled, running": Run.objects.get(pk=materialize(schedule).run_id),
        "interactive, running": running_run(owner, agent),
        "interactive, cancelled": Run.objects.get(pk=cancelled.pk),
    }


def test_a_delegated_child_carries_its_parents_remaining_dollars_to_the_micro_dollar(runs):
    child = runs["delegated"]
    assert child.kind == "delegated"
    max_cost = Decimal(child.limits["max_cost"])
    assert max_cost.as_tuple().exponent < -2  # more places than a person types


@pytest.mark.parametrize(
    "kind",
    [
        "delegated",
        "its parent",
        "scheduled, completed",
        "scheduled, failed",
        "scheduled, running",
        "interactive, running",
        "interactive, cancelled",
        "interactive, refused admission",
    ],
)
def test_every_surface_reads_every_kind_of_run(runs, owner, admin_user, kind):
    run = runs[kind]
    api = Api(token_for(owner, "read"))
    dashboard = Client(raise_request_exception=False)
    dashboard.force_login(owner)
    admin = Client(raise_request_exception=False)
    admin.force_login(admin_user)

    read = api.get(f"/runs/{run.pk}")
    assert read.status_code == 200, read.content
    assert read.json()["limits"]["max_cost"] == run.limits["max_cost"]  # as stored, every place kept
    assert api.get(f"/conversations/{run.conversation_id}").status_code == 200
    assert dashboard.get(f"/runs/{run.pk}/").status_code == 200
    assert dashboard.get(f"/conversations/{run.conversation_id}/").status_code == 200
    assert admin.get(f"/admin/runs/run/{run.pk}/change/").status_code == 200
    assert admin.get(f"/admin/runs/conversation/{run.conversation_id}/change/").status_code == 200
    schedule_id = run.conversation.schedule_id
    if schedule_id is not None:
        assert api.get(f"/schedules/{schedule_id}").status_code == 200
        assert api.get(f"/schedules/{schedule_id}/occurrences").status_code == 200
        assert dashboard.get(f"/schedules/{schedule_id}/").status_code == 200
