"""docs/decisions/0002, point 3: schedule.run_accounted carries failure: null unless the run failed,
otherwise its reason, error class and whichever sanitized diagnostics the run recorded. The failure
message and every other detail stay with the run, and the event outlives it."""

from __future__ import annotations

import json

import pytest

from accounting.models import AccountingEvent
from runs.services import delete_conversation
from tests.factories import make_agent, make_schedule, run_due

pytestmark = pytest.mark.django_db

MARKER = "ZEBRA-7731-PRIVATE"


def test_a_failed_run_is_diagnosable_after_its_conversation_is_deleted_without_any_content(owner):
    briefing = make_schedule(owner, make_agent(model="sim-bad-param"), prompt=f"Summarise {MARKER} for me.")
    run = run_due(briefing)
    assert MARKER in run.failure_message  # the provider echoed the prompt; it stays with the run

    delete_conversation(run.conversation)

    event = AccountingEvent.objects.get(schedule_id=briefing.pk)
    assert event.payload["failure"] == {
        "reason": "provider_error",
        "error_class": "ProviderPermanentError",
        "provider": "simulated",
        "provider_code": "invalid_request_error",
        "http_status": 400,
        "provider_parameter": "messages[1].content",
    }
    assert event.payload["run_id"] == run.pk
    assert MARKER not in json.dumps(event.payload)
    assert "Summarise" not in json.dumps(event.payload)


def test_a_completed_run_has_failure_null_and_its_usage(owner):
    briefing = make_schedule(owner, make_agent(model="sim-research"))
    run = run_due(briefing)
    payload = AccountingEvent.objects.get().payload
    assert payload["failure"] is None
    assert payload["usage"] == {
        "steps": 3,
        "model_calls": 3,
        "tool_calls": 2,
        "cost": f"{run.cost.normalize():f}",
    }


def test_a_transient_provider_failure_names_its_provider_code_and_status(owner):
    briefing = make_schedule(owner, make_agent(model="sim-overloaded"))
    run_due(briefing)
    assert AccountingEvent.objects.get().payload["failure"] == {
        "reason": "provider_error",
        "error_class": "ProviderTransientError",
        "provider": "simulated",
        "provider_code": "overloaded_error",
        "http_status": 529,
    }


def test_a_budget_failure_carries_no_provider_diagnostics(owner):
    briefing = make_schedule(owner, make_agent(model="sim-ignores-reserve"))
    run_due(briefing)
    failure = AccountingEvent.objects.get().payload["failure"]
    assert failure == {"reason": "synthesis_reserve_violation", "error_class": "SynthesisReserveViolation"}
