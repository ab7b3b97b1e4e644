"""Bad provider input ends in a clear classification (provider_error for theirs, internal_error for
ours), never a hang, and never an unaccounted call: a response whose usage could be read gets a
ledger entry and counts as a model call even when the rest of it is unusable."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import pytest
from django.conf import settings

from accounting.models import LedgerEntry
from runs.models import DEFAULT_MAX_OUTPUT_TOKENS, TranscriptEntry
from tests.factories import make_agent
from tests.runs.wire import ANTHROPIC, OPENAI, WIRES, Provider, execute, ledger_total, make_wire_agent

pytestmark = pytest.mark.django_db


def _run(owner, wire, *replies, tools=None):
    provider = Provider(*replies)
    agent = make_wire_agent(wire, tools=tools if tools is not None else ["clock.now"])
    return execute(owner, agent, provider), provider


def _entries(run):
    return list(LedgerEntry.objects.filter(run_id=run.pk).order_by("id"))


class Broken(httpx.SyncByteStream):
    """A body cut off mid-stream: the connection closes before the message is complete."""

    def __iter__(self):
        yield b'{"id": "chatcmpl-1", "object": "chat.completion", "choi'
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )


# -- theirs: unreadable bodies --------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(
            200, text='{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mes'
        ),
        httpx.Response(200, text="<!DOCTYPE html><html><body>Just a moment...</body></html>"),
        httpx.Response(200, text=""),
    ],
    ids=["truncated JSON", "an HTML page", "an empty body"],
)
def test_a_200_that_is_not_json_is_a_transient_provider_error_charged_as_a_lost_answer(owner, wire, reply):
    run, provider = _run(owner, wire, reply)

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "provider_error",
        "ProviderTransientError",
    )
    assert run.http_status == 200
    assert "not valid JSON" in run.failure_message
    assert len(provider.requests) == 1 + settings.PROVIDER_MAX_RETRIES
    _charged_an_estimate_per_attempt(run)


def _charged_an_estimate_per_attempt(run, *, output_tokens: int = 0) -> None:
    """A 200 whose answer was lost on the way was billed all the same: each attempt is charged its
    input bound and the output seen (none), marked estimated (docs/decisions/0006-streaming.md)."""
    entries = _entries(run)
    assert len(entries) == run.model_calls == 1 + settings.PROVIDER_MAX_RETRIES
    assert all(e.estimated and e.input_tokens > 0 and e.output_tokens == output_tokens for e in entries)
    assert all(e.cost > 0 and e.prices["basis"].startswith("estimate") for e in entries)
    assert run.cost == sum(e.cost for e in entries) <= run.run_limits.max_cost


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_body_cut_off_mid_stream_is_a_transient_provider_error(owner, wire):
    run, provider = _run(owner, wire, lambda request: httpx.Response(200, stream=Broken()))

    assert (run.failure_reason, run.error_class, run.http_status) == (
        "provider_error",
        "ProviderTransientError",
        None,
    )
    assert len(provider.requests) == 1 + settings.PROVIDER_MAX_RETRIES
    _charged_an_estimate_per_attempt(run)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_body_with_a_broken_content_encoding_is_a_provider_error_not_ours(owner, wire):
    def garbled(request):
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=b"\x1f\x8b not really gzip")

    run, provider = _run(owner, wire, garbled)

    assert (run.failure_reason, run.error_class) == ("provider_error", "ProviderTransientError")
    assert "could not be decoded" in run.failure_message
    assert len(provider.requests) == 1 + settings.PROVIDER_MAX_RETRIES
    _charged_an_estimate_per_attempt(run)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_json_body_that_is_not_an_object_is_a_permanent_provider_error(owner, wire):
    run, provider = _run(owner, wire, httpx.Response(200, json=["not", "a", "completion"]))

    assert (run.failure_reason, run.error_class, run.http_status) == (
        "provider_error",
        "ProviderPermanentError",
        200,
    )
    assert len(provider.requests) == 1


# -- theirs: usage ------------------------------------------------------------------------------


def _without_usage(body):
    return {key: value for key, value in body.items() if key != "usage"}


def _with_usage(wire, body, **tokens):
    usage = dict(body["usage"])
    usage.update(tokens)
    return {**body, "usage": usage}


def _charged_its_worst_case(run) -> None:
    """One entry, charged the call's worst case: its input bound at the dearest input price and its
    output cap at the output price (the agent's own USD 3 / 15 per million), never nothing."""
    (entry,) = _entries(run)
    assert entry.output_tokens == DEFAULT_MAX_OUTPUT_TOKENS and entry.input_tokens > 0
    worst = (Decimal(entry.input_tokens) * 3 + Decimal(entry.output_tokens) * 15) / 1_000_000
    assert entry.cost == worst.quantize(Decimal("0.000001"), rounding="ROUND_CEILING") == run.cost > 0
    assert entry.prices["basis"].startswith("worst case")


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_response_without_usage_fails_the_run_and_is_charged_its_worst_case(owner, wire):
    run, _ = _run(owner, wire, _without_usage(wire.answer()))

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "provider_error",
        "ProviderPermanentError",
    )
    assert "reported no usage" in run.failure_message and "worst case" in run.failure_message
    assert run.model_calls == 1
    _charged_its_worst_case(run)
    assert run.answer == ""


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize(
    ("count", "shown"),
    [(-5, "-5"), (10**15, "1000000000000000"), ("12", "'12'"), (1.5, "1.5"), (True, "True"), (None, "")],
    ids=["negative", "absurd", "a string", "a float", "a boolean", "null"],
)
def test_an_invalid_token_count_fails_the_run_as_a_provider_error(owner, wire, count, shown):
    key = "completion_tokens" if wire is OPENAI else "output_tokens"
    run, _ = _run(owner, wire, _with_usage(wire, wire.answer(), **{key: count}))

    assert (run.failure_reason, run.error_class, run.transient) == (
        "provider_error",
        "ProviderPermanentError",
        False,
    )
    assert key in run.failure_message and shown in run.failure_message
    assert run.model_calls == 1
    _charged_its_worst_case(run)  # never a negative, fractional or absurd charge


def test_anthropic_null_cache_counts_are_read_as_zero(owner):
    body = _with_usage(ANTHROPIC, ANTHROPIC.answer(usage=(1000, 100)), cache_creation_input_tokens=None)
    body["usage"]["cache_read_input_tokens"] = None
    run, _ = _run(owner, ANTHROPIC, body)

    assert run.status == "completed"
    assert [(e.input_tokens, e.output_tokens) for e in _entries(run)] == [(1000, 100)]


def test_anthropic_cache_tokens_are_billed_as_input(owner):
    body = _with_usage(
        ANTHROPIC,
        ANTHROPIC.answer(usage=(1000, 100)),
        cache_creation_input_tokens=2000,
        cache_read_input_tokens=3000,
    )
    run, _ = _run(owner, ANTHROPIC, body)

    (entry,) = _entries(run)
    assert (entry.input_tokens, entry.cache_write_5m_tokens, entry.cache_read_tokens) == (6000, 2000, 3000)
    assert entry.output_tokens == 100
    # The agent's own prices name input and output only: the cache kinds are billed at the input price.
    assert run.cost == Decimal("0.019500")  # 6000 x USD 3/M + 100 x USD 15/M


# -- theirs: the shape of the answer --------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "mangle", "defect"),
    [
        (OPENAI, lambda body: body.pop("choices"), "no choices"),
        (OPENAI, lambda body: body.update(choices=[]), "no choices"),
        (OPENAI, lambda body: body["choices"][0].pop("message"), "no message"),
        (
            OPENAI,
            lambda body: body["choices"][0]["message"].update(tool_calls=[{"id": "call_1"}]),
            "no function name",
        ),
        (OPENAI, lambda body: body["choices"][0]["message"].update(tool_calls=7), "tool calls"),
        (ANTHROPIC, lambda body: body.pop("content"), "no content blocks"),
        (ANTHROPIC, lambda body: body.update(content=["text"]), "not an object"),
        (ANTHROPIC, lambda body: body.update(content=[{"type": "tool_use", "id": "toolu_1"}]), "has no name"),
    ],
    ids=[
        "choices missing",
        "choices empty",
        "message missing",
        "a tool call without a name",
        "tool calls not a list",
        "content missing",
        "a content block that is not an object",
        "a tool_use block without a name",
    ],
)
def test_an_unusable_response_is_accounted_then_fails_the_run_as_a_provider_error(
    owner, wire, mangle, defect
):
    body = wire.answer(usage=(10_000, 1_000))
    mangle(body)
    run, provider = _run(owner, wire, body)

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "provider_error",
        "ProviderPermanentError",
    )
    assert defect in run.failure_message
    assert len(provider.requests) == 1
    assert run.model_calls == 1
    assert run.cost == Decimal("0.045000") == ledger_total(run)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_unknown_model_is_a_permanent_provider_error(owner, wire):
    missing = httpx.Response(
        404,
        json=(
            wire.error(
                "invalid_request_error",
                "The model `gpt-unknown` does not exist or you do not have access to it.",
                code="model_not_found",
            )
            if wire is OPENAI
            else wire.error("not_found_error", "model: claude-unknown")
        ),
    )
    run, provider = _run(owner, wire, missing)

    assert (run.failure_reason, run.error_class, run.http_status) == (
        "provider_error",
        "ProviderPermanentError",
        404,
    )
    assert run.provider_code == ("model_not_found" if wire is OPENAI else "not_found_error")
    assert len(provider.requests) == 1


def test_an_unknown_model_on_the_simulated_provider_is_a_permanent_provider_error(owner):
    from runs.runtime import execute_run
    from runs.services import claim_run
    from tests.factories import start_interactive_run

    run = start_interactive_run(owner.pk, make_agent(model="sim-nonexistent"), "Hello?")
    claim_run(run)
    run = execute_run(run, sleep=lambda s: None)

    assert (run.failure_reason, run.error_class, run.http_status) == (
        "provider_error",
        "ProviderPermanentError",
        404,
    )
    assert (run.provider, run.provider_code) == ("simulated", "model_not_found")


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_tool_arguments_that_are_not_json_are_a_tool_error_the_model_sees(owner, wire):
    arguments = '{"url": "https://example.com/' if wire is OPENAI else "not an object"
    run, provider = _run(owner, wire, wire.tools(("clock_now", arguments)), wire.answer())

    assert run.status == "completed"
    assert run.tool_calls == 1
    result = TranscriptEntry.objects.get(run=run, role="tool")
    assert result.is_error and result.content == "Error: the arguments for clock.now must be a JSON object."
    assert wire.tool_results(provider.bodies[1]) == [(result.content, True)]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_nul_characters_from_the_provider_are_stored_and_accounted(owner, wire):
    run, _ = _run(
        owner,
        wire,
        wire.tools(("clock_now", {"note": "a\x00b"}), text="Checking\x00 the time."),
        wire.answer("The answer\x00 is 42."),
    )

    assert run.status == "completed"
    assert run.answer == "The answer\ufffd is 42."
    assert run.model_calls == 2 and len(_entries(run)) == 2
    assert "\x00" not in str(
        list(TranscriptEntry.objects.filter(run=run).values_list("content", "tool_calls"))
    )


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_provider_error_message_with_nul_characters_is_recorded(owner, wire):
    run, _ = _run(owner, wire, httpx.Response(400, json=wire.error("invalid_request_error", "bad\x00input")))

    assert (run.status, run.error_class) == ("failed", "ProviderPermanentError")
    assert run.failure_message == "bad\ufffdinput"


def test_a_bug_of_ours_is_recorded_as_an_internal_error(owner, monkeypatch):
    import dataclasses

    from runs import tools

    def broken(arguments, context):
        raise ZeroDivisionError("a bug in a tool")

    monkeypatch.setitem(
        tools._REGISTRY, "clock.now", dataclasses.replace(tools._REGISTRY["clock.now"], handler=broken)
    )
    run, provider = _run(owner, OPENAI, OPENAI.tools(("clock_now", {})), OPENAI.answer())

    assert (run.status, run.failure_reason, run.error_class) == ("failed", "internal_error", "InternalError")
    assert run.transient is None
    assert "ZeroDivisionError" in run.failure_message
    assert len(provider.requests) == 1
    assert run.model_calls == 1 and len(_entries(run)) == 1


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_absurdly_long_tool_call_id_is_stored_and_echoed_back_whole(owner, wire):
    long_id = "call_" + "x" * 300
    body = wire.tools(("clock_now", {}))
    if wire is OPENAI:
        body["choices"][0]["message"]["tool_calls"][0]["id"] = long_id
    else:
        body["content"][0]["id"] = long_id
    run, provider = _run(owner, wire, body, wire.answer())

    assert run.status == "completed"
    assert TranscriptEntry.objects.get(run=run, role="tool").tool_call_id == long_id[:128]
    echoed = json.dumps(provider.bodies[1])
    assert echoed.count(long_id) == 2  # the assistant's call and its result still match
