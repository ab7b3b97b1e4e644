"""Plain words before codes: what a failure means and whether it will pass, read from the
structured fields of the one failure vocabulary (runs.failures), then the identifiers."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs import failures
from runs.failures import Failure, provider_situation
from tests.runs.provider_error_cases import CASES, Case


def provider(status: int | None, code: str = "", *, transient: bool, parameter: str = "") -> Failure:
    failure = Failure.from_payload(
        {
            "reason": "provider_error",
            "error_class": "ProviderTransientError" if transient else "ProviderPermanentError",
            "provider": "anthropic",
            "provider_code": code,
            "http_status": status,
            "provider_parameter": parameter,
        }
    )
    assert failure is not None
    return failure


@pytest.mark.parametrize(
    ("status", "code", "transient", "headline"),
    [
        (529, "overloaded_error", True, "The AI provider was overloaded — usually temporary."),
        (200, "overloaded_error", True, "The AI provider was overloaded — usually temporary."),
        (429, "rate_limit_exceeded", True, "The AI provider's rate limit was reached — usually temporary."),
        (
            429,
            "insufficient_quota",
            False,
            "The provider account is out of quota or hit its spend limit — it will fail again until the "
            "account is topped up or its limit raised.",
        ),
        # Anthropic's tier spend cap (the cap is in error.details; the recorded code is the type),
        # or a Retry-After above the cap (Groq's tokens per day): neither is called a quota.
        (
            429,
            "rate_limit_error",
            False,
            "The AI provider's account hit a limit that will not lift within a run (a spend cap, or a "
            "rate limit that asked for a longer wait than a run can make) — it will fail again until "
            "that limit resets or is raised.",
        ),
        (
            401,
            "invalid_api_key",
            False,
            "The provider refused the agent's API key or what it may do — it will fail again until the "
            "key or its permissions are fixed.",
        ),
        (
            404,
            "not_found_error",
            False,
            "The provider does not know the agent's model or address — it will fail again until the "
            "agent's model or base URL is fixed.",
        ),
        (
            400,
            "invalid_request_error",
            False,
            "The provider refused the request as invalid — it will fail again until the prompt or the "
            "agent's settings change.",
        ),
        (
            400,
            "context_length_exceeded",
            False,
            "The request was too long for the model — it will fail again until the prompt is shorter or "
            "the agent uses a model with more context.",
        ),
        (500, "server_error", True, "The AI provider had a server error — usually temporary."),
        (
            None,
            "",
            True,
            "The AI provider did not answer (the connection failed or timed out) — usually temporary.",
        ),
    ],
)
def test_a_provider_error_reads_as_what_happened_and_whether_it_passes(status, code, transient, headline):
    assert provider(status, code, transient=transient).headline == headline


def test_the_identifiers_follow_in_a_quieter_line():
    failure = provider(400, "invalid_request_error", transient=False, parameter="messages[1].content")
    assert failure.identifiers == (
        "provider error · permanent · HTTP 400 · invalid_request_error · parameter messages[1].content"
        " · anthropic"
    )
    assert "messages[1].content" not in failure.headline


def test_a_budget_failure_names_the_limit_it_used_up():
    def budget(dimension: str, limit: int | Decimal | None) -> str:
        failure = Failure.from_payload(
            {"reason": "budget_exhausted", "error_class": "BudgetExhausted"}, dimension, limit=limit
        )
        assert failure is not None
        return failure.headline

    assert budget("cost", Decimal("1.00")) == "The run used its whole USD 1.00 budget before answering."
    assert budget("steps", 10) == "The run used all 10 of its steps before answering."
    assert budget("model_calls", None) == "The run used all of its model calls before answering."
    assert budget("", None) == "The run used its whole budget before answering."


def test_a_run_reads_its_own_limit_for_the_words():
    class FailedRun:
        status = "failed"
        failure_reason = "budget_exhausted"
        error_class = "BudgetExhausted"
        transient = None
        provider = provider_code = provider_parameter = ""
        http_status = None
        failure_dimension = "cost"
        limits = {"max_cost": "1.00"}

    failure = Failure.from_run(FailedRun())
    assert failure is not None
    assert failure.headline == "The run used its whole USD 1.00 budget before answering."


@pytest.mark.parametrize(
    ("failure", "passes", "change", "owner_fixes"),
    [
        (provider(529, "overloaded_error", transient=True), True, "", False),
        (
            provider(429, "insufficient_quota", transient=False),
            False,
            "the provider account is topped up or its spend limit raised",
            False,
        ),
        (
            provider(401, "invalid_api_key", transient=False),
            False,
            "an admin fixes the agent's API key or its permissions",
            False,
        ),
        (
            provider(400, "invalid_request_error", transient=False),
            False,
            "the prompt or the agent's settings change",
            True,
        ),
        (
            Failure.from_payload(
                {"reason": "synthesis_reserve_violation", "error_class": "SynthesisReserveViolation"}
            ),
            False,
            "the prompt or the agent changes",
            True,
        ),
        (
            Failure.from_payload({"reason": "budget_exhausted", "error_class": "BudgetExhausted"}),
            None,
            "",
            False,
        ),
    ],
)
def test_each_failure_says_whether_it_passes_and_what_must_change_first(failure, passes, change, owner_fixes):
    assert (failure.passes, failure.change_first, failure.owner_fixes) == (passes, change, owner_fixes)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_words_agree_with_the_classification_of_every_recorded_provider_error(case: Case):
    situation = provider_situation(
        transient=case.transient, http_status=case.http_status, provider_code=case.code
    )
    assert situation.passes is case.transient
    assert situation in failures.SITUATIONS


def test_a_retry_the_provider_refused_is_not_called_temporary():
    # A 529 with x-should-retry: false is permanent: its words must not promise it will pass.
    assert provider(529, "overloaded_error", transient=False).headline.startswith("The AI provider refused")
