"""GET /api/v1/runs/{id}: limits, usage, synthesis and the failure with its message (owner only)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs.failures import Diagnostics, ProviderPermanentError
from runs.limits import format_money
from tests.api.conftest import error_of
from tests.factories import fail, make_agent, make_schedule, materialize, run_due

pytestmark = pytest.mark.django_db

RUN_FIELDS = {
    "id",
    "kind",
    "status",
    "limits",
    "usage",
    "synthesis",
    "failure",
    "conversation_id",
    "started_at",
    "finished_at",
    "tokens",  # the run's calls' tokens by kind, in total
    "calls",  # each provider call as billed
    "answer",  # once completed
    "answer_cut",  # the answer stopped at the agent's maximum output per call
    "partial_answer",  # while running: the text its current call has streamed so far
}


def test_a_failed_run_shows_its_classification_diagnostics_and_message(owner, agent, owner_api):
    failure = ProviderPermanentError(
        "Invalid value for messages[1].content: 'Research the news'",
        diagnostics=Diagnostics(
            provider="openai",
            provider_code="invalid_request_error",
            http_status=400,
            provider_parameter="messages[1].content",
        ),
    )
    run = fail(materialize(make_schedule(owner, agent)), failure)

    response = owner_api.get(f"/runs/{run.pk}")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == RUN_FIELDS
    assert body["status"] == "failed"
    assert body["kind"] == "interactive"
    assert body["conversation_id"] == run.conversation_id
    assert body["failure"] == {
        "reason": "provider_error",
        "error_class": "ProviderPermanentError",
        "transient": False,
        "provider": "openai",
        "provider_code": "invalid_request_error",
        "http_status": 400,
        "provider_parameter": "messages[1].content",
        "message": "Invalid value for messages[1].content: 'Research the news'",
    }
    assert body["limits"]["max_cost"] == "5.00"
    assert body["usage"] == {"steps": 0, "model_calls": 0, "tool_calls": 0, "cost": "0.00"}
    assert body["finished_at"].endswith("+00:00")


def test_a_run_that_reached_its_reserve_shows_which_dimension_and_step(owner, owner_api):
    agent = make_agent("tight", model="sim-research", max_steps=3)
    schedule = make_schedule(owner, agent)

    run = run_due(schedule)

    body = owner_api.get(f"/runs/{run.pk}").json()
    assert body["status"] == "completed"
    assert body["failure"] is None
    assert body["synthesis"] == {"dimension": "steps", "step": run.synthesis_step}
    assert body["usage"]["steps"] == run.steps
    assert body["usage"]["cost"] == format_money(run.cost)
    assert run.synthesis_step is not None


def test_a_completed_run_without_synthesis_has_null_synthesis_and_failure(owner, agent, owner_api):
    run = run_due(make_schedule(owner, agent))

    body = owner_api.get(f"/runs/{run.pk}").json()

    assert body["synthesis"] is None
    assert body["failure"] is None
    assert body["usage"]["model_calls"] >= 1


def test_another_owners_run_is_404_even_for_an_admin(owner, agent, other_api, admin_api):
    run = fail(materialize(make_schedule(owner, agent)))

    for api in (other_api, admin_api):
        response = api.get(f"/runs/{run.pk}")
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"


def test_a_run_shows_each_call_as_billed_and_the_tokens_in_total(owner, owner_api):
    from tests.runs.wire import OPENAI, Provider, execute, make_wire_agent

    first = OPENAI.tools(("clock_now", {}), usage=(1_000, 40))
    first["usage"]["prompt_tokens_details"] = {"cached_tokens": 600, "audio_tokens": 0}
    provider = Provider(first, OPENAI.answer(usage=(1_200, 90)))
    run = execute(owner, make_wire_agent(OPENAI, tools=["clock.now"]), provider)

    body = owner_api.get(f"/runs/{run.pk}").json()

    assert [(c["step"], c["tokens"]["input"], c["tokens"]["cache_read"]) for c in body["calls"]] == [
        (1, 1_000, 600),
        (2, 1_200, 0),
    ]
    assert body["tokens"]["input"] == 2_200 and body["tokens"]["output"] == 130
    assert sum(Decimal(c["cost"]) for c in body["calls"]) == Decimal(body["usage"]["cost"])
    assert body["calls"][0]["prices"] == "agent override" and body["calls"][0]["reported_cost"] is None
