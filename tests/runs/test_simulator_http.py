"""The simulated provider end to end over real HTTP: served by a live test server at
/simulator/v1/chat/completions and reached through the same OpenAI-compatible adapter and httpx client as
a real provider. Each scripted model of docs/contract.md#the-simulated-provider behaves as described."""

from __future__ import annotations

import time
import uuid
from decimal import Decimal

import httpx
import pytest

from accounting.models import LedgerEntry
from runs.models import Run
from runs.providers import adapter_for, client_for
from runs.providers.base import Message, ModelRequest
from runs.runtime import execute_run
from runs.services import claim_run
from tests.factories import limits, make_agent, make_schedule, materialize, start_interactive_run

pytestmark = pytest.mark.django_db

PROMPT = "Research today's technology news and write a briefing."


def _agent(live_server, model: str, **overrides):
    return make_agent(
        model=model, base_url=live_server.url + "/simulator/v1", tools=["clock.now"], **overrides
    )


def _run(owner, agent, *, prompt: str = PROMPT, run_limits=None, sleeps: list[float] | None = None) -> Run:
    run = start_interactive_run(owner.pk, agent, prompt, limits=run_limits)
    claim_run(run)
    slept = sleeps if sleeps is not None else []
    return execute_run(run, sleep=slept.append)  # no client given: a real httpx client to the URL


def test_a_run_against_the_simulator_over_http_completes_through_the_adapter(owner, live_server):
    agent = _agent(live_server, "sim-research")
    run = _run(owner, agent)

    assert run.status == "completed"
    assert run.answer == "Briefing (sim-research): summary written from 2 tool result(s) after 2 turn(s)."
    assert (run.steps, run.model_calls, run.tool_calls) == (3, 3, 2)
    assert run.cost > 0


def test_the_http_endpoint_and_the_in_process_transport_answer_alike(live_server):
    agent = _agent(live_server, "sim-research")
    request = ModelRequest(model="sim-research", system="", messages=(Message(role="user", content=PROMPT),))
    with client_for(agent) as over_http:
        remote = adapter_for(agent, over_http).complete(request)
    agent.base_url = ""
    with client_for(agent) as in_process:
        local = adapter_for(agent, in_process).complete(request)

    assert isinstance(over_http, httpx.Client) and remote.usage == local.usage
    assert (
        [call.name for call in remote.tool_calls] == [call.name for call in local.tool_calls] == ["clock_now"]
    )


def test_a_scheduled_run_over_http_is_accounted_for_its_schedule(owner, live_server):
    occurrence = materialize(make_schedule(owner, _agent(live_server, "sim-research")))
    run = execute_run(occurrence.run, sleep=lambda s: None)

    occurrence.refresh_from_db()
    assert (run.status, occurrence.outcome) == ("completed", "completed")


# -- the scripted models (docs/contract.md#the-simulated-provider)
# ----------------------------------------------------------------


def test_sim_research_obeys_a_synthesis_instruction(owner, live_server):
    run = _run(owner, _agent(live_server, "sim-research"), run_limits=limits(max_tool_calls=1))

    assert run.status == "completed"
    assert (run.steps, run.tool_calls, run.synthesis_dimension, run.synthesis_step) == (2, 1, "tool_calls", 2)


def test_sim_tool_loop_asks_for_tools_until_told_to_synthesize(owner, live_server):
    run = _run(
        owner,
        _agent(live_server, "sim-tool-loop"),
        run_limits=limits(max_steps=5, max_tool_calls=20, synthesis_reserve_steps=1),
    )

    assert run.status == "completed"
    assert (run.steps, run.tool_calls, run.synthesis_dimension, run.synthesis_step) == (5, 4, "steps", 5)


def test_sim_ignores_reserve_fails_closed(owner, live_server):
    run = _run(
        owner,
        _agent(live_server, "sim-ignores-reserve"),
        run_limits=limits(max_steps=4, max_tool_calls=20, synthesis_reserve_steps=1),
    )

    assert (run.failure_reason, run.error_class, run.failure_dimension) == (
        "synthesis_reserve_violation",
        "SynthesisReserveViolation",
        "steps",
    )
    assert run.tool_calls == 3


def test_sim_expensive_costs_about_sixty_cents_a_call(owner, live_server):
    from runs.providers.simulated import EXPENSIVE_OUTPUT, EXPENSIVE_PRICES

    run = _run(owner, _agent(live_server, "sim-expensive", prices=EXPENSIVE_PRICES))

    assert run.status == "completed" and run.model_calls == 3
    for entry in LedgerEntry.objects.filter(run_id=run.pk):
        assert entry.output_tokens == EXPENSIVE_OUTPUT
        assert Decimal("0.60") <= entry.cost < Decimal("0.61")  # 2,000 x USD 300/M, and the input


def test_the_simulator_reports_every_kind_of_usage_and_honours_the_cap(owner, live_server):
    from runs.providers.simulated import EXPENSIVE_OUTPUT, PRICES

    run = _run(owner, _agent(live_server, "sim-research", prices=PRICES))
    first, *later = LedgerEntry.objects.filter(run_id=run.pk).order_by("id")
    assert first.cache_write_5m_tokens > 0 and first.cache_read_tokens == 0  # it writes the prefix
    assert all(e.cache_read_tokens > 0 for e in later)  # and reads it back
    assert first.reasoning_tokens > 0  # tool-asking turns reason
    capped = _run(owner, _agent(live_server, "sim-expensive"), run_limits=limits(max_cost="0.20"))
    entry = LedgerEntry.objects.filter(run_id=capped.pk).get()
    assert entry.output_tokens < EXPENSIVE_OUTPUT and entry.cost <= Decimal("0.20")  # cut by the dollars
    assert (capped.failure_reason, capped.failure_dimension) == ("budget_exhausted", "cost")


def test_sim_routed_reports_what_it_charged_and_the_ledger_records_that(owner, live_server):
    from runs.providers.simulated import PRICES

    run = _run(owner, _agent(live_server, "sim-routed", prices=PRICES))
    entries = list(LedgerEntry.objects.filter(run_id=run.pk))
    assert run.status == "completed" and entries
    for entry in entries:
        assert entry.reported_cost is not None and entry.cost == entry.reported_cost
        assert not entry.reported_differs  # the agent's prices are the simulator's


def test_sim_rate_limited_is_transient_and_retried_after_its_retry_after(owner, live_server, settings):
    sleeps: list[float] = []
    run = _run(owner, _agent(live_server, "sim-rate-limited"), sleeps=sleeps)

    assert (run.failure_reason, run.error_class, run.transient) == (
        "provider_error",
        "ProviderTransientError",
        True,
    )
    assert (run.provider, run.provider_code, run.http_status) == ("simulated", "rate_limit_exceeded", 429)
    assert sleeps == [1.0] * settings.PROVIDER_MAX_RETRIES


def test_sim_quota_is_permanent(owner, live_server):
    sleeps: list[float] = []
    run = _run(owner, _agent(live_server, "sim-quota"), sleeps=sleeps)

    assert (run.error_class, run.provider_code, run.http_status) == (
        "ProviderPermanentError",
        "insufficient_quota",
        429,
    )
    assert sleeps == []


def test_sim_overloaded_is_a_transient_529(owner, live_server):
    run = _run(owner, _agent(live_server, "sim-overloaded"))

    assert (run.error_class, run.provider_code, run.http_status) == (
        "ProviderTransientError",
        "overloaded_error",
        529,
    )


def test_sim_server_error_is_a_transient_500(owner, live_server):
    run = _run(owner, _agent(live_server, "sim-server-error"))

    assert (run.error_class, run.provider_code, run.http_status) == (
        "ProviderTransientError",
        "server_error",
        500,
    )


def test_sim_bad_param_names_the_parameter_and_keeps_the_echoed_prompt_in_the_message_only(
    owner, live_server
):
    run = _run(owner, _agent(live_server, "sim-bad-param"), prompt="My confidential prompt.")

    assert (run.error_class, run.provider_code, run.http_status) == (
        "ProviderPermanentError",
        "invalid_request_error",
        400,
    )
    assert run.provider_parameter == "messages[1].content"
    assert "My confidential prompt." in run.failure_message
    assert "confidential" not in str(run.failure_summary())


def test_sim_flaky_fails_the_first_attempt_of_each_turn_then_answers(owner, live_server):
    sleeps: list[float] = []
    # The simulator remembers turns by their content: a fresh prompt makes fresh turns.
    run = _run(owner, _agent(live_server, "sim-flaky"), prompt=f"{PROMPT} ({uuid.uuid4()})", sleeps=sleeps)

    assert run.status == "completed"
    assert (run.steps, run.model_calls) == (3, 3)
    assert len(sleeps) == 3  # one retry per turn


def test_sim_slow_answers_after_the_delay_in_the_prompt(owner, live_server):
    started = time.monotonic()
    run = _run(owner, _agent(live_server, "sim-slow"), prompt="Take your time: delay=1")
    elapsed = time.monotonic() - started

    assert run.status == "completed"
    assert run.steps == 1
    assert 1.0 <= elapsed < 10


def test_an_unknown_model_is_a_permanent_404(owner, live_server):
    run = _run(owner, _agent(live_server, "sim-unknown"))

    assert (run.error_class, run.provider_code, run.http_status) == (
        "ProviderPermanentError",
        "model_not_found",
        404,
    )


def test_the_development_webhook_sink_accepts_a_signed_test_notification(live_server, owner):
    from schedules import notices

    notices.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url=f"{live_server.url}/simulator/webhook/"
    )
    (attempt,) = notices.send_test_notification(owner, attempts=1)
    assert (attempt.channel, attempt.outcome, attempt.http_status) == ("webhook", "delivered", 204)
