"""docs/contract.md#providers-and-failures against the world: every recorded error response of
provider_error_cases.py replayed through the real adapter and the run loop's retry policy. The run is
classified, retried the stated number of times (waiting what a Retry-After asks), records the stated
diagnostics, and keeps a readable provider message, never a whole HTML page."""

from __future__ import annotations

import httpx
import pytest

from accounting.models import LedgerEntry
from tests.runs.provider_error_cases import CASES, RETRIES, Case
from tests.runs.wire import ANTHROPIC, OPENAI, Provider, execute, make_wire_agent

pytestmark = pytest.mark.django_db

MAX_MESSAGE_FROM_A_PAGE = 200
# Failures after the request went out: the provider may have generated, and billed, the answer.
SENT_THEN_CUT = (httpx.ReadTimeout, httpx.ReadError, httpx.RemoteProtocolError)


@pytest.fixture(autouse=True)
def _retries(settings):
    settings.PROVIDER_MAX_RETRIES = RETRIES


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_recorded_error_is_classified_retried_and_diagnosed_as_spec_4_says(owner, case: Case):
    wire = OPENAI if case.provider == "openai" else ANTHROPIC
    provider = Provider(case.reply())
    sleeps: list[float] = []
    run = execute(owner, make_wire_agent(wire), provider, sleeps=sleeps)

    assert (run.status, run.failure_reason) == ("failed", "provider_error")
    assert run.error_class == ("ProviderTransientError" if case.transient else "ProviderPermanentError")
    assert len(provider.requests) == 1 + case.retries
    if case.waits is not None:
        assert sleeps == [case.waits] * case.retries
    assert (run.provider, run.provider_code, run.http_status, run.provider_parameter) == (
        wire.provider,
        case.code,
        case.http_status,
        case.param,
    )
    assert case.message in run.failure_message
    entries = list(LedgerEntry.objects.filter(run_id=run.pk))
    if isinstance(case.body, SENT_THEN_CUT):
        # The request was sent, and the call ended without its usage: the provider may have billed
        # it, so each attempt is charged an estimate (docs/decisions/0006-streaming.md).
        assert len(entries) == run.model_calls == 1 + case.retries
        assert all(entry.estimated and entry.cost > 0 for entry in entries)
        assert run.cost == sum(entry.cost for entry in entries) <= run.run_limits.max_cost
    else:
        assert (run.steps, run.model_calls, run.cost, entries) == (0, 0, 0, [])


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c.body, str)], ids=lambda c: c.name)
def test_a_page_from_a_proxy_leaves_a_short_line_not_its_html(owner, case: Case):
    wire = OPENAI if case.provider == "openai" else ANTHROPIC
    run = execute(owner, make_wire_agent(wire), Provider(case.reply()))

    assert len(run.failure_message) <= MAX_MESSAGE_FROM_A_PAGE
    assert "<" not in run.failure_message
