"""docs/contract.md#providers-and-failures: provider failures are classified on structured fields only,
in the order no response -> x-should-retry -> HTTP status -> error.type / error.code; transient ones are
retried a bounded number of times honouring Retry-After, permanent ones never; the run records sanitized
diagnostics and never a secret. Every row runs a real run through the OpenAI and the Anthropic adapter."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
import time_machine
from django.conf import settings

from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Run, TranscriptEntry
from runs.runtime import execute_run
from schedules.models import Occurrence
from tests.factories import make_schedule, materialize
from tests.runs.wire import ANTHROPIC, OPENAI, WIRES, Provider, Wire, execute, make_wire_agent

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Row:
    """One row of the classification table: what the provider sends and what the run records."""

    name: str
    status: int | None  # None: no response at all
    transient: bool
    body: Any = None  # a function of the wire, a fixed body, or raw text
    headers: dict[str, str] = field(default_factory=dict)
    error: Exception | None = None
    code: dict[str, str] = field(default_factory=dict)  # provider_code per wire; "" when absent
    param: str = ""  # OpenAI's error.param; Anthropic errors have none
    message: str = ""

    @property
    def billed(self) -> bool:
        """The request was sent and the call ended without its usage: the provider may bill it."""
        return isinstance(self.error, httpx.ReadTimeout | httpx.ReadError | httpx.RemoteProtocolError)

    def reply(self, wire: Wire) -> Any:
        if self.error is not None:
            return self.error
        assert self.status is not None
        body = self.body(wire) if callable(self.body) else self.body
        if isinstance(body, str):
            return httpx.Response(self.status, headers=self.headers, text=body)
        return httpx.Response(self.status, headers=self.headers, json=body)

    def expected_code(self, wire: Wire) -> str:
        return self.code.get(wire.provider, "")

    def expected_param(self, wire: Wire) -> str:
        return self.param if wire is OPENAI else ""


def _both(code: str) -> dict[str, str]:
    return {"openai": code, "anthropic": code}


HTML_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n"
)
HTML_504 = (
    "<html><head><title>504 Gateway Time-out</title></head><body><h1>504 Gateway Time-out</h1></body></html>"
)

TRANSIENT = [
    Row("connect error", None, True, error=httpx.ConnectError("[Errno 111] Connection refused")),
    Row("timeout", None, True, error=httpx.ReadTimeout("The read operation timed out")),
    Row("connection reset", None, True, error=httpx.ReadError("[Errno 104] Connection reset by peer")),
    Row(
        "server disconnected",
        None,
        True,
        error=httpx.RemoteProtocolError("Server disconnected without sending a response."),
    ),
    Row(
        "x-should-retry true on a 400",
        400,
        True,
        body=lambda w: w.error("invalid_request_error", "Please retry this request."),
        headers={"x-should-retry": "true"},
        code={"openai": "invalid_request_error", "anthropic": "invalid_request_error"},
        message="Please retry this request.",
    ),
    Row(
        "408 request timeout",
        408,
        True,
        body=lambda w: w.error("timeout_error", "Request timed out."),
        code=_both("timeout_error"),
        message="Request timed out.",
    ),
    Row(
        "409 conflict",
        409,
        True,
        body=lambda w: w.error("invalid_request_error", "A conflicting request is in progress."),
        code=_both("invalid_request_error"),
        message="A conflicting request is in progress.",
    ),
    Row(
        "429 rate limit",
        429,
        True,
        body=lambda w: (
            w.error(
                "tokens",
                "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): "
                "Limit 30000, Used 29623, Requested 1234. Please try again in 1.714s.",
                code="rate_limit_exceeded",
            )
            if w is OPENAI
            else w.error(
                "rate_limit_error",
                "This request would exceed the rate limit for your organization of 50,000 input "
                "tokens per minute. Please try again in 1.714s.",
            )
        ),
        code={"openai": "rate_limit_exceeded", "anthropic": "rate_limit_error"},
        message="Please try again in 1.714s.",
    ),
    Row(
        "500 internal server error",
        500,
        True,
        body=lambda w: (
            w.error(
                "server_error",
                "The server had an error while processing your request. Sorry about that!",
            )
            if w is OPENAI
            else w.error("api_error", "Internal server error")
        ),
        code={"openai": "server_error", "anthropic": "api_error"},
    ),
    Row("502 bad gateway (an HTML page)", 502, True, body=HTML_502, message="HTTP 502"),
    Row(
        "503 service unavailable",
        503,
        True,
        body=lambda w: w.error("server_error", "The engine is currently overloaded, please try again later."),
        code=_both("server_error"),
        message="currently overloaded",
    ),
    Row("504 gateway timeout", 504, True, body=HTML_504, message="HTTP 504"),
    Row(
        "529 overloaded",
        529,
        True,
        body=lambda w: w.error("overloaded_error", "Overloaded"),
        code=_both("overloaded_error"),
        message="Overloaded",
    ),
    Row("520 another 5xx", 520, True, body="error code: 520", message="HTTP 520"),
    Row(
        "200 with an overloaded error event",
        200,
        True,
        body=lambda w: w.error("overloaded_error", "Overloaded"),
        code=_both("overloaded_error"),
        message="Overloaded",
    ),
    Row(
        "200 with an api error event",
        200,
        True,
        body=lambda w: w.error("api_error", "Internal server error"),
        code=_both("api_error"),
        message="Internal server error",
    ),
    Row(
        "200 with a rate-limit error event",
        200,
        True,
        body=lambda w: w.error(
            "rate_limit_error", "Number of concurrent connections has exceeded your rate limit."
        ),
        code=_both("rate_limit_error"),
        message="concurrent connections",
    ),
]

PERMANENT = [
    Row(
        "x-should-retry false on a 503",
        503,
        False,
        body=lambda w: w.error("server_error", "Do not retry this request."),
        headers={"x-should-retry": "false"},
        code=_both("server_error"),
        message="Do not retry this request.",
    ),
    Row(
        "400 invalid parameter",
        400,
        False,
        body=lambda w: w.error(
            "invalid_request_error",
            "Invalid type for 'messages[1].content': expected one of a string or array of objects.",
            code="invalid_type",
            param="messages[1].content",
        ),
        code={"openai": "invalid_type", "anthropic": "invalid_request_error"},
        param="messages[1].content",
        message="Invalid type for 'messages[1].content'",
    ),
    Row(
        "400 context length exceeded",
        400,
        False,
        body=lambda w: (
            w.error(
                "invalid_request_error",
                "This model's maximum context length is 128000 tokens. However, your messages "
                "resulted in 130412 tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
                param="messages",
            )
            if w is OPENAI
            else w.error("invalid_request_error", "prompt is too long: 210412 tokens > 200000 maximum")
        ),
        code={"openai": "context_length_exceeded", "anthropic": "invalid_request_error"},
        param="messages",
        message="",
    ),
    Row(
        "401 unauthorized",
        401,
        False,
        body=lambda w: (
            w.error(
                "invalid_request_error",
                "Incorrect API key provided: sk-proj-********wxyz. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )
            if w is OPENAI
            else w.error("authentication_error", "invalid x-api-key")
        ),
        code={"openai": "invalid_api_key", "anthropic": "authentication_error"},
    ),
    Row(
        "402 payment required",
        402,
        False,
        body=lambda w: (
            # OpenRouter: a numeric code, which is not an identifier and is dropped.
            {
                "error": {
                    "code": 402,
                    "message": "Insufficient credits. Add more using https://openrouter.ai/credits",
                }
            }
            if w is OPENAI
            else w.error("billing_error", "Your credit balance is too low to access the Anthropic API.")
        ),
        code={"openai": "", "anthropic": "billing_error"},
        message="redit",
    ),
    Row(
        "403 forbidden",
        403,
        False,
        body=lambda w: (
            w.error(
                "request_forbidden",
                "Country, region, or territory not supported",
                code="unsupported_country_region_territory",
            )
            if w is OPENAI
            else w.error(
                "permission_error", "Your API key does not have permission to use the specified resource."
            )
        ),
        code={"openai": "unsupported_country_region_territory", "anthropic": "permission_error"},
    ),
    Row(
        "404 unknown model",
        404,
        False,
        body=lambda w: (
            w.error(
                "invalid_request_error",
                "The model `gpt-9-preview` does not exist or you do not have access to it.",
                code="model_not_found",
            )
            if w is OPENAI
            else w.error("not_found_error", "model: claude-9-preview")
        ),
        code={"openai": "model_not_found", "anthropic": "not_found_error"},
        message="9-preview",
    ),
    Row(
        "413 request too large",
        413,
        False,
        body=lambda w: w.error("request_too_large", "Request exceeds the maximum allowed number of bytes."),
        code=_both("request_too_large"),
        message="maximum allowed number of bytes",
    ),
    Row(
        "422 unprocessable (a proxy's validation error)",
        422,
        False,
        body={
            "detail": [{"loc": ["body", "messages"], "msg": "field required", "type": "value_error.missing"}]
        },
        message="HTTP 422",
    ),
    Row(
        "429 insufficient quota",
        429,
        False,
        body=lambda w: (
            w.error(
                "insufficient_quota",
                "You exceeded your current quota, please check your plan and billing details.",
                code="insufficient_quota",
            )
            if w is OPENAI
            else w.error("insufficient_quota", "You exceeded your current quota.")
        ),
        code=_both("insufficient_quota"),
        message="exceeded your current quota",
    ),
    Row(
        "429 credit balance exhausted",
        429,
        False,
        body=lambda w: w.error(
            "credit_balance_exhausted", "Your credit balance is exhausted.", code="credit_balance_exhausted"
        ),
        code=_both("credit_balance_exhausted"),
    ),
    Row(
        "429 spend limit exceeded",
        429,
        False,
        body=lambda w: w.error(
            "monthly_spend_limit_exceeded",
            "Monthly spend limit reached.",
            code="monthly_spend_limit_exceeded",
        ),
        code=_both("monthly_spend_limit_exceeded"),
    ),
    Row(
        "429 usage limit exceeded",
        429,
        False,
        body=lambda w: w.error(
            "daily_usage_limit_exceeded", "Daily usage limit reached.", code="daily_usage_limit_exceeded"
        ),
        code=_both("daily_usage_limit_exceeded"),
    ),
    Row(
        "429 with Retry-After above the cap",
        429,
        False,
        body=lambda w: w.error("rate_limit_error", "Rate limited.", code="rate_limit_exceeded"),
        headers={"retry-after": "120"},
        code={"openai": "rate_limit_exceeded", "anthropic": "rate_limit_error"},
        message="Retry-After 120 s is above the cap",
    ),
    Row(
        "503 with Retry-After above the cap",
        503,
        False,
        body=lambda w: w.error("server_error", "Down for maintenance."),
        headers={"retry-after": "3600"},
        code=_both("server_error"),
        message="Retry-After 3600 s is above the cap",
    ),
    Row(
        "200 with another error event",
        200,
        False,
        body=lambda w: w.error("invalid_request_error", "messages: at least one message is required"),
        code=_both("invalid_request_error"),
    ),
    Row(
        "418 another 4xx",
        418,
        False,
        body=lambda w: w.error("teapot_error", "I'm a teapot."),
        code=_both("teapot_error"),
        message="teapot",
    ),
    Row(
        "451 another 4xx without a body",
        451,
        False,
        body="",
        message="HTTP 451",
    ),
]


def _run_against(owner, wire: Wire, *replies: Any) -> tuple[Run, Provider, list[float]]:
    provider = Provider(*replies)
    sleeps: list[float] = []
    run = execute(owner, make_wire_agent(wire), provider, sleeps=sleeps)
    return run, provider, sleeps


def _assert_classified(run: Run, wire: Wire, row: Row) -> None:
    assert run.status == "failed"
    assert run.failure_reason == "provider_error"
    assert run.error_class == ("ProviderTransientError" if row.transient else "ProviderPermanentError")
    assert run.transient is row.transient
    assert run.provider == wire.provider
    assert run.provider_code == row.expected_code(wire)
    assert run.http_status == row.status
    assert run.provider_parameter == row.expected_param(wire)
    assert row.message in run.failure_message
    assert run.failure_message


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize("row", TRANSIENT, ids=lambda row: row.name)
def test_a_transient_failure_is_retried_a_bounded_number_of_times_then_fails_the_run(owner, wire, row):
    run, provider, sleeps = _run_against(owner, wire, row.reply(wire))

    _assert_classified(run, wire, row)
    assert len(provider.requests) == 1 + settings.PROVIDER_MAX_RETRIES
    assert len(sleeps) == settings.PROVIDER_MAX_RETRIES
    entries = list(LedgerEntry.objects.filter(run_id=run.pk))
    if row.billed:
        # Sent, then cut before its usage: each attempt is charged an estimate that never undercounts.
        assert len(entries) == run.model_calls == 1 + settings.PROVIDER_MAX_RETRIES
        assert all(entry.estimated and entry.cost > 0 for entry in entries)
        assert run.cost == sum(entry.cost for entry in entries)
    else:
        assert (run.steps, run.model_calls, run.cost, entries) == (0, 0, 0, [])  # no response, no bill


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize("row", PERMANENT, ids=lambda row: row.name)
def test_a_permanent_failure_fails_the_run_without_a_retry(owner, wire, row):
    run, provider, sleeps = _run_against(owner, wire, row.reply(wire))

    _assert_classified(run, wire, row)
    assert len(provider.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_error_response_is_not_a_model_call_and_costs_nothing(owner, wire):
    run, _, _ = _run_against(
        owner, wire, httpx.Response(500, json=wire.error("api_error", "Internal server error"))
    )

    assert (run.steps, run.model_calls, run.cost) == (0, 0, 0)
    assert not LedgerEntry.objects.filter(run_id=run.pk).exists()


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_transient_failure_that_recovers_completes_the_run_with_one_model_call(owner, wire):
    run, provider, sleeps = _run_against(
        owner, wire, httpx.Response(503, json=wire.error("overloaded_error", "Overloaded")), wire.answer()
    )

    assert run.status == "completed"
    assert run.answer == "Briefing: three things happened today."
    assert len(provider.requests) == 2 and len(sleeps) == 1
    assert run.model_calls == 1
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 1


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_retries_wait_at_least_the_retry_after_the_provider_asked_for(owner, wire):
    limited = httpx.Response(
        429,
        headers={"retry-after": "7"},
        json=wire.error("rate_limit_error", "Rate limited.", code="rate_limit_exceeded"),
    )
    run, _, sleeps = _run_against(owner, wire, limited)

    assert run.error_class == "ProviderTransientError"
    assert sleeps == [7.0] * settings.PROVIDER_MAX_RETRIES


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_retry_after_in_milliseconds_is_honoured(owner, wire):
    limited = httpx.Response(
        429, headers={"retry-after-ms": "2500"}, json=wire.error("rate_limit_error", "Rate limited.")
    )
    _, _, sleeps = _run_against(owner, wire, limited, wire.answer())

    assert sleeps == [2.5]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_retry_after_as_an_http_date_is_honoured(owner, wire):
    now = datetime(2026, 9, 1, 6, 0, tzinfo=UTC)
    limited = httpx.Response(
        503,
        headers={"retry-after": format_datetime(now + timedelta(seconds=30), usegmt=True)},
        json=wire.error("overloaded_error", "Overloaded"),
    )
    with time_machine.travel(now, tick=False):
        _, _, sleeps = _run_against(owner, wire, limited, wire.answer())

    assert sleeps == [30.0]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_retry_after_of_exactly_the_cap_is_still_honoured(owner, wire):
    limited = httpx.Response(
        429, headers={"retry-after": "60"}, json=wire.error("rate_limit_error", "Rate limited.")
    )
    run, _, sleeps = _run_against(owner, wire, limited, wire.answer())

    assert run.status == "completed"
    assert sleeps == [60.0]


def test_backoff_without_retry_after_is_jittered_and_capped(owner, settings):
    settings.PROVIDER_BACKOFF_BASE_SECONDS = 1.0
    settings.PROVIDER_BACKOFF_CAP_SECONDS = 1.5
    settings.PROVIDER_MAX_RETRIES = 5
    sleeps: list[float] = []
    for _ in range(5):
        run, _, slept = _run_against(owner, OPENAI, httpx.Response(502, text=HTML_502))
        assert run.error_class == "ProviderTransientError"
        sleeps += slept

    assert len(sleeps) == 25
    assert all(0 <= delay <= 1.5 for delay in sleeps)
    assert len(set(sleeps)) > 1  # jittered, not a fixed schedule
    assert all(delay <= 1.0 for delay in sleeps[0::5])  # the first wait is under base * 2**0


def test_the_number_of_retries_is_a_setting(owner, settings):
    settings.PROVIDER_MAX_RETRIES = 1
    run, provider, sleeps = _run_against(
        owner, ANTHROPIC, httpx.Response(529, json=ANTHROPIC.error("overloaded_error", "Overloaded"))
    )

    assert run.error_class == "ProviderTransientError"
    assert len(provider.requests) == 2 and len(sleeps) == 1


# -- sanitized diagnostics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "param", "kept_code", "kept_param"),
    [
        ("invalid_value", "tools[0].function.parameters", "invalid_value", "tools[0].function.parameters"),
        ("not an identifier", "messages[0]", "", "messages[0]"),
        ("x" * 65, "y" * 65, "", ""),
        ("x" * 64, "y" * 64, "x" * 64, "y" * 64),
        ("code<script>", "param; DROP TABLE", "", ""),
        # A final newline is not part of an identifier (a `$` anchor would let it through, and
        # 64 characters plus one overflowed the column and left the run unfinished).
        ("invalid_value\n", "messages[0]\n", "", ""),
        ("x" * 64 + "\n", "y" * 64 + "\n", "", ""),
        (
            "model:gpt-4o/v1",
            "messages[2].tool_calls[0].id",
            "model:gpt-4o/v1",
            "messages[2].tool_calls[0].id",
        ),
        (12, ["messages"], "invalid_request_error", ""),
    ],
)
def test_only_short_identifiers_are_kept_as_code_and_parameter(owner, code, param, kept_code, kept_param):
    bad = httpx.Response(
        400, json=OPENAI.error("invalid_request_error", "Bad request.", code=code, param=param)
    )
    run, _, _ = _run_against(owner, OPENAI, bad)

    assert (run.provider_code, run.provider_parameter) == (kept_code, kept_param)
    assert run.failure_message == "Bad request."


def test_an_anthropic_error_type_that_is_not_an_identifier_is_dropped(owner):
    run, _, _ = _run_against(
        owner, ANTHROPIC, httpx.Response(400, json=ANTHROPIC.error("invalid request", "Bad."))
    )

    assert (run.error_class, run.provider_code, run.http_status) == ("ProviderPermanentError", "", 400)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_status_outside_100_to_599_is_not_recorded(owner, wire):
    run, _, _ = _run_against(owner, wire, httpx.Response(999, json=wire.error("api_error", "Odd gateway.")))

    assert run.failure_reason == "provider_error"
    assert run.http_status is None
    assert run.provider_code == "api_error"


def test_the_provider_message_goes_to_the_failure_message_only(owner):
    message = "Invalid content: 'my private note about the merger'"
    bad = httpx.Response(
        400, json=OPENAI.error("invalid_request_error", message, param="messages[1].content")
    )
    occurrence = materialize(make_schedule(owner, make_wire_agent(OPENAI)))
    with Provider(bad).client() as client:
        run = execute_run(occurrence.run, client=client, sleep=lambda s: None)

    assert run.failure_message == message
    event = AccountingEvent.objects.get(run_id=run.pk)
    assert "merger" not in json.dumps(event.payload)
    assert event.payload["failure"] == {
        "reason": "provider_error",
        "error_class": "ProviderPermanentError",
        "provider": "openai",
        "provider_code": "invalid_request_error",
        "http_status": 400,
        "provider_parameter": "messages[1].content",
    }


# -- secrets ------------------------------------------------------------------------------------

SECRET = "sk-test-4f9a1c2e8b7d6a5f3e2d1c0b"


@pytest.fixture
def api_key(monkeypatch) -> str:
    monkeypatch.setenv("TEST_PROVIDER_API_KEY", SECRET)
    return SECRET


def _stored_everywhere(run: Run) -> str:
    rows = [
        list(Run.objects.filter(pk=run.pk).values()),
        list(TranscriptEntry.objects.filter(run_id=run.pk).values()),
        list(LedgerEntry.objects.filter(run_id=run.pk).values()),
        list(AccountingEvent.objects.filter(run_id=run.pk).values()),
        list(Occurrence.objects.filter(run_id=run.pk).values()),
    ]
    return json.dumps(rows, default=str)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_api_key_is_sent_on_every_request(owner, wire, api_key):
    agent = make_wire_agent(wire, tools=["clock.now"])
    agent.api_key_setting = "TEST_PROVIDER_API_KEY"
    agent.save()
    provider = Provider(wire.tools(("clock_now", {})), wire.answer())
    run = execute(owner, agent, provider)

    assert run.status == "completed"
    expected = f"Bearer {api_key}" if wire is OPENAI else api_key
    assert [wire.credential(request) for request in provider.requests] == [expected, expected]
    assert api_key not in _stored_everywhere(run)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_api_key_is_never_stored_even_when_the_provider_echoes_it(owner, wire, api_key):
    agent = make_wire_agent(wire)
    agent.api_key_setting = "TEST_PROVIDER_API_KEY"
    agent.save()
    echo = httpx.Response(
        401,
        json=wire.error(api_key, f"Incorrect API key provided: {api_key}.", code=api_key, param=api_key),
    )
    occurrence = materialize(make_schedule(owner, agent))
    with Provider(echo).client() as client:
        run = execute_run(occurrence.run, client=client, sleep=lambda s: None)

    assert (run.status, run.error_class, run.http_status) == ("failed", "ProviderPermanentError", 401)
    assert "Incorrect API key provided" in run.failure_message
    assert AccountingEvent.objects.filter(run_id=run.pk).exists()
    assert api_key not in _stored_everywhere(run)


def test_without_a_key_setting_no_credential_is_sent(owner):
    provider = Provider(OPENAI.answer())
    execute(owner, make_wire_agent(OPENAI), provider)

    assert "authorization" not in provider.requests[0].headers
