"""Streamed provider calls (docs/decisions/0006-streaming.md): the chunk sequences providers document,
assembled into the one response the loop sees; calls cut mid-stream charged an estimate that never
undercounts; Stop closing a generating stream within a second; the text shown as it is written, at
most once a second. Every provider here answers through httpx.MockTransport or the simulator, with
the product's real adapters, watch and loop.

Where a sequence comes from:
- OpenAI function-calling stream: https://platform.openai.com/docs/guides/function-calling#streaming
  (the tool call's id and name first, then its arguments in pieces, later deltas with `id`/`name`
  null), and the usage chunk with empty `choices` that `stream_options.include_usage` adds
  (https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options).
- OpenRouter's error once generation started: an SSE data event with an `error` and
  `finish_reason: "error"` (https://openrouter.ai/docs/api-reference/streaming, "Handling Errors
  During Streaming").
- Anthropic's stream with tool use (text, then a `tool_use` block whose input arrives as
  `input_json_delta` pieces, `message_delta` with `stop_reason: tool_use`) and its mid-stream
  `overloaded_error` event: https://docs.anthropic.com/en/docs/build-with-claude/streaming.
- llama.cpp's tool-call stream, recorded from the real server this suite runs
  (tests/real_model/, xllamacpp 2026.10.11549, Gemma 3 270M with config/gemma-tools.jinja).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.db import connection

from accounting.models import LedgerEntry
from runs.models import Run
from runs.providers.anthropic import AnthropicAdapter
from runs.providers.base import Message, ModelRequest
from runs.providers.openai import OpenAIAdapter
from runs.providers.stream import CutCall, Watch
from runs.runtime import execute_run
from runs.services import cancel_run, claim_run
from tests.factories import make_agent, start_interactive_run
from tests.runs.wire import ANTHROPIC, OPENAI, Provider, execute, make_wire_agent

pytestmark = pytest.mark.django_db

SSE = {"content-type": "text/event-stream"}
REQUEST = ModelRequest(model="m", system="", messages=(Message(role="user", content="What is the weather?"),))


def _data(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = (
        [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _call(done: dict[str, Any]) -> dict[str, Any]:
    return {"index": 0, "id": None, "function": {"arguments": done, "name": None}, "type": None}


# OpenAI's function-calling guide, "Streaming": get_weather for Paris, France.
OPENAI_TOOL_STREAM = _data(
    _chunk({"role": "assistant", "content": None}),
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                    "function": {"arguments": "", "name": "get_weather"},
                    "type": "function",
                }
            ]
        }
    ),
    *[
        _chunk({"tool_calls": [_call(piece)]})
        for piece in ['{"', "location", '":"', "Paris", ",", " France", '"}']
    ],  # type: ignore[arg-type]
    _chunk({}, "tool_calls"),
    _chunk(None, usage=_usage(80, 17)),
)

# Anthropic's streaming guide, "Streaming request with tool use".
ANTHROPIC_TOOL_STREAM = "".join(
    f"event: {e['type']}\ndata: {json.dumps(e)}\n\n"
    for e in [
        {
            "type": "message_start",
            "message": {
                "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-4-1-20250805",
                "stop_sequence": None,
                "usage": {"input_tokens": 472, "output_tokens": 2},
                "content": [],
                "stop_reason": None,
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Okay"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ", let's check"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": " the weather for San Francisco, CA:"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "name": "get_weather",
                "input": {},
            },
        },
        *[
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in [
                "",
                '{"location":',
                ' "San',
                " Francisc",
                "o,",
                ' CA"',
                ", ",
                '"unit": "fah',
                'renheit"}',
            ]
        ],
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
        {"type": "message_stop"},
    ]
).encode()

# Anthropic's streaming guide, "Error events": overloaded, mid-stream.
OVERLOADED = (
    b"event: error\n"
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)

# Recorded from this suite's real llama.cpp server: a tool call it parsed out of the model's
# <tool_call> markup, sent as deltas (arguments "{" then "}"), then the usage chunk.
LLAMA_CPP_TOOL_STREAM = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],'
    b'"created":1796359765,"id":"chatcmpl-Fw2qyf2bx3AagEYver2h1w30cXRxZbpg","model":"gemma-3-270m",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,'
    b'"id":"SZqlRXGGZN7jUXB8VD0zb0UpKTK5QjHn","type":"function","function":{"name":"clock_now",'
    b'"arguments":"{"}}]}}],"created":1796359765,"id":"chatcmpl-Fw2qyf2bx3AagEYver2h1w30cXRxZbpg",'
    b'"model":"gemma-3-270m","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":'
    b'{"arguments":"}"}}]}}],"created":1796359766,"id":"chatcmpl-Fw2qyf2bx3AagEYver2h1w30cXRxZbpg",'
    b'"model":"gemma-3-270m","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":"tool_calls","index":0,"delta":{}}],"created":1796359766,'
    b'"id":"chatcmpl-Fw2qyf2bx3AagEYver2h1w30cXRxZbpg","model":"gemma-3-270m",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[],"created":1796359766,"id":"chatcmpl-Fw2qyf2bx3AagEYver2h1w30cXRxZbpg",'
    b'"model":"gemma-3-270m","system_fingerprint":"b0-unknown","object":"chat.completion.chunk",'
    b'"usage":{"completion_tokens":24,"prompt_tokens":137,"total_tokens":161,'
    b'"prompt_tokens_details":{"cached_tokens":1}},"timings":{"cache_n":1,"prompt_n":136}}\n\n'
    b"data: [DONE]\n\n"
)


class Texts(Watch):
    def __init__(self) -> None:
        self.deltas: list[str] = []

    def text(self, delta: str) -> None:
        self.deltas.append(delta)


def _complete(adapter_class: type, body: bytes, **kwargs: Any) -> tuple[Any, Texts]:
    client = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, headers=SSE, content=body))
    )
    adapter = adapter_class(
        client, name="p", base_url="https://provider.example/v1" if adapter_class is OpenAIAdapter else ""
    )
    watch = Texts()
    return adapter.complete(REQUEST, watch), watch


# -- the documented sequences, assembled ---------------------------------------------------------


def test_openais_tool_call_deltas_are_assembled_into_one_call_with_its_usage():
    response, _ = _complete(OpenAIAdapter, OPENAI_TOOL_STREAM)

    (call,) = response.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_DdmO9pD3xa9XTPNJ32zg2hcA",
        "get_weather",
        {"location": "Paris, France"},
    )
    assert (response.usage.input_tokens, response.usage.output_tokens) == (80, 17)
    assert response.text == "" and not response.truncated and not response.defect


def test_parallel_tool_calls_are_assembled_by_their_index_whatever_the_interleaving():
    def start(index: int, name: str) -> dict[str, Any]:
        return _chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": f"call_{index}",
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )

    def more(index: int, piece: str) -> dict[str, Any]:
        return _chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    body = _data(
        start(0, "clock_now"),
        start(1, "http_fetch"),
        more(1, '{"url": "https://exa'),
        more(0, "{}"),
        more(1, 'mple.com/"}'),
        _chunk({}, "tool_calls"),
        _chunk(None, usage=_usage(10, 30)),
    )
    response, _ = _complete(OpenAIAdapter, body)

    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("clock_now", {}),
        ("http_fetch", {"url": "https://example.com/"}),
    ]


def test_anthropics_tool_use_stream_is_one_response_with_its_text_call_and_usage():
    response, watch = _complete(AnthropicAdapter, ANTHROPIC_TOOL_STREAM)

    assert response.text == "Okay, let's check the weather for San Francisco, CA:"
    assert "".join(watch.deltas) == response.text  # the owner saw it as it came
    (call,) = response.tool_calls
    assert (call.id, call.name) == ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather")
    assert call.arguments == {"location": "San Francisco, CA", "unit": "fahrenheit"}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (472, 89)


def test_a_llama_cpp_tool_call_stream_recorded_from_the_real_server_is_one_call():
    response, _ = _complete(OpenAIAdapter, LLAMA_CPP_TOOL_STREAM)

    (call,) = response.tool_calls
    assert (call.name, call.arguments) == ("clock_now", {})
    assert response.usage.input_tokens == 137 and response.usage.cache_read_tokens == 1
    assert response.usage.output_tokens == 24


def test_comments_keep_alives_and_a_missing_done_do_not_break_a_stream():
    body = (
        b": OPENROUTER PROCESSING\n\n"
        b"data: " + json.dumps(_chunk({"content": "Hel"})).encode() + b"\r\n\r\n"
        b": OPENROUTER PROCESSING\n\n"
        b"data: " + json.dumps(_chunk({"content": "lo"}, "stop")).encode() + b"\n\n"
        b"data: " + json.dumps(_chunk(None, usage=_usage(5, 2))).encode() + b"\n\n"
    )  # no [DONE]: the finish reason and the usage came
    response, watch = _complete(OpenAIAdapter, body)

    assert response.text == "Hello" and watch.deltas == ["Hel", "lo"]
    assert response.usage.output_tokens == 2


def test_a_server_that_ignores_stream_and_answers_whole_still_works():
    provider = Provider(OPENAI.answer("Whole."), streams=False)
    run = execute(make_user(), make_wire_agent(OPENAI), provider)

    assert json.loads(provider.requests[0].content)["stream"] is True
    assert run.status == "completed" and run.answer == "Whole."
    assert not LedgerEntry.objects.get(run_id=run.pk).estimated


def make_user():
    from tests.factories import make_user as make

    return make("streamer")


# -- errors inside the stream ---------------------------------------------------------------------


def test_openrouters_error_after_generation_began_is_a_transient_cut_charged_what_streamed():
    # The router had streamed "The weath" when its upstream went away.
    body = (
        b"data: " + json.dumps(_chunk({"role": "assistant", "content": ""})).encode() + b"\n\n"
        b"data: " + json.dumps(_chunk({"content": "The weath"})).encode() + b"\n\n"
        b"data: "
        + json.dumps(
            {
                "id": "cmpl-abc123",
                "object": "chat.completion.chunk",
                "created": 1234567890,
                "model": "gpt-3.5-turbo",
                "provider": "openai",
                "error": {"code": "server_error", "message": "Provider disconnected unexpectedly"},
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
            }
        ).encode()
        + b"\n\n"
    )
    with pytest.raises(CutCall) as cut:
        _complete(OpenAIAdapter, body)

    assert cut.value.transient and not cut.value.ours and cut.value.reason == "error_event"
    assert cut.value.diagnostics.provider_code == "server_error"
    assert cut.value.streamed.output_tokens == len(
        b"The weath"
    )  # the bytes it showed: one token each at most
    assert "Provider disconnected unexpectedly" in cut.value.message


def test_anthropics_overloaded_error_mid_stream_is_transient_and_the_cut_call_is_charged(owner):
    started = ANTHROPIC_TOOL_STREAM.split(b"event: content_block_stop")[0]
    overloaded = OVERLOADED
    provider = Provider(
        httpx.Response(200, headers=SSE, content=started + overloaded),
        ANTHROPIC.answer("Sunny.", usage=(500, 20)),
    )
    run = execute(owner, make_wire_agent(ANTHROPIC), provider)

    assert run.status == "completed" and run.answer == "Sunny."
    cut, answered = LedgerEntry.objects.filter(run_id=run.pk).order_by("id")
    # What it had streamed, three text deltas, counted as the bound counts (bytes), at most the cap.
    shown = len(b"Okay, let's check the weather for San Francisco, CA:")
    assert (
        cut.estimated
        and cut.output_tokens == shown
        and cut.input_tokens == cut.prices["bound"]["input_tokens"]
    )
    assert 0 < cut.cost < Decimal(cut.prices["bound"]["worst"])
    assert not answered.estimated and (answered.input_tokens, answered.output_tokens) == (500, 20)
    assert run.cost == cut.cost + answered.cost and run.model_calls == 2


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=str)
def test_an_error_before_any_output_is_a_refused_request_not_a_charge(owner, wire):
    if wire is OPENAI:
        body = (
            b"data: "
            + json.dumps(
                {"error": {"message": "Overloaded", "type": "server_error", "code": "server_error"}}
            ).encode()
            + b"\n\n"
        )
    else:
        body = OVERLOADED
    provider = Provider(httpx.Response(200, headers=SSE, content=body), wire.answer("Fine."))
    run = execute(owner, make_wire_agent(wire), provider)

    assert run.status == "completed" and len(provider.requests) == 2
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert not entry.estimated


# -- cut by us: the idle timeout ------------------------------------------------------------------


class Stalling(httpx.SyncByteStream):
    """A stream that sends its first chunks and then goes silent (for up to a minute); closing it
    (the call's watch cutting the call) ends the silence at once."""

    def __init__(self, first: list[bytes]) -> None:
        self.first = first
        self.closed = threading.Event()

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from self.first
        self.closed.wait(60)

    def close(self) -> None:
        self.closed.set()


def test_a_stream_that_stalls_past_the_idle_timeout_is_cut_charged_at_most_its_bound_then_answered(
    owner, settings
):
    settings.PROVIDER_IDLE_TIMEOUT_SECONDS = 0.3
    first = [
        b"data: " + json.dumps(_chunk({"role": "assistant", "content": ""})).encode() + b"\n\n",
        b"data: " + json.dumps(_chunk({"content": "Three things"})).encode() + b"\n\n",
    ]
    stall = Stalling(first)
    provider = Provider(
        lambda request: httpx.Response(200, headers=SSE, stream=stall),
        OPENAI.answer("Done.", usage=(300, 40)),
    )
    started = time.monotonic()
    run = execute(owner, make_wire_agent(OPENAI), provider)

    assert time.monotonic() - started < 5  # cut after ~0.3 s of silence, not after a minute
    assert run.status == "completed" and run.answer == "Done."
    cut, answered = LedgerEntry.objects.filter(run_id=run.pk).order_by("id")
    bound = cut.prices["bound"]
    # Ours was the cut: the provider may have gone on writing up to the cap; never above the bound.
    assert (
        cut.estimated and cut.output_tokens == bound["output_cap"] and 0 < cut.cost <= Decimal(bound["worst"])
    )
    assert "idle" in cut.prices["basis"]
    # The retry is a new call with its own bound; its answer is billed exactly from its usage chunk.
    assert not answered.estimated and (answered.input_tokens, answered.output_tokens) == (300, 40)
    assert answered.cost == Decimal("0.001500")  # 300 x USD 3/M + 40 x USD 15/M
    assert run.cost == cut.cost + answered.cost <= run.run_limits.max_cost


def test_a_provider_that_never_begins_is_cut_at_the_first_token_timeout(owner, settings):
    settings.PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS = 0.3
    settings.PROVIDER_MAX_RETRIES = 0
    first = [b"data: " + json.dumps(_chunk({"role": "assistant", "content": ""})).encode() + b"\n\n"]
    run = execute(
        owner,
        make_wire_agent(OPENAI),
        Provider(lambda request: httpx.Response(200, headers=SSE, stream=Stalling(first))),
    )

    assert (run.failure_reason, run.error_class) == ("provider_error", "ProviderTransientError")
    assert "first-token timeout" in run.failure_message
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.estimated and entry.cost == Decimal(entry.prices["bound"]["worst"])


def test_the_deadline_cuts_a_call_that_streams_on_and_the_run_times_out_charged(owner, settings):
    endless = Stalling([b"data: " + json.dumps(_chunk({"content": "word "})).encode() + b"\n\n"] * 5)
    agent = make_wire_agent(OPENAI)
    run = start_interactive_run(owner.pk, agent, "Write for ever.")
    claim_run(run)
    with Provider(lambda request: httpx.Response(200, headers=SSE, stream=endless)).client() as client:
        started = time.monotonic()
        run = execute_run(run, client=client, heartbeat=False, deadline=time.time() + 0.5)

    assert time.monotonic() - started < 3
    assert (run.failure_reason, run.error_class) == ("timeout", "RunTimeout")
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.estimated and "deadline" in entry.prices["basis"]


# -- Stop, and the text as it is written ----------------------------------------------------------


def _wait(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _driven(run: Run) -> threading.Event:
    """Drive the claimed run on a thread of its own, as a worker does; set when it has ended."""
    ended = threading.Event()

    def drive() -> None:
        try:
            execute_run(Run.objects.get(pk=run.pk), sleep=lambda s: None)
        finally:
            connection.close()  # this thread's own connection
            ended.set()

    threading.Thread(target=drive, daemon=True).start()
    return ended


@pytest.mark.django_db(transaction=True)
def test_stop_closes_a_generating_stream_within_a_second_and_what_it_generated_is_charged(owner):
    # The simulator writes its answer over 30 s (sim-slow, delay=30).
    agent = make_agent("slow", model="sim-slow")
    run = start_interactive_run(owner.pk, agent, "Take your time: delay=30")
    claim_run(run)
    ended = _driven(run)
    _wait(lambda: Run.objects.filter(pk=run.pk).exclude(partial_text="").exists())
    stopped = time.monotonic()
    assert cancel_run(Run.objects.get(pk=run.pk))
    assert ended.wait(5)
    took = time.monotonic() - stopped

    assert took < 1.0
    run.refresh_from_db()
    assert run.status == "cancelled" and not run.open_call and run.partial_text == ""
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.estimated and "stopped" in entry.prices["basis"]
    assert entry.output_tokens == entry.prices["bound"]["output_cap"] and run.cost == entry.cost > 0


@pytest.mark.django_db(transaction=True)
def test_the_answer_grows_on_the_run_and_in_the_api_at_most_once_a_second(owner):
    from tests.api.conftest import Api, token_for

    api = Api(token_for(owner, "read"))
    agent = make_agent("slow", model="sim-slow")
    run = start_interactive_run(owner.pk, agent, "Write slowly: delay=3.5")  # ~14 words over 3.5 s
    claim_run(run)
    ended = _driven(run)
    seen: list[str] = []
    in_api: list[str] = []
    while not ended.wait(0.05):
        text = Run.objects.get(pk=run.pk).partial_text
        if text and (not seen or text != seen[-1]):
            seen.append(text)
            body = api.get(f"/runs/{run.pk}").json()
            if body["status"] == "running":
                in_api.append(body["partial_answer"])
    run.refresh_from_db()

    assert run.status == "completed"
    assert 2 <= len(seen) <= 6  # ~14 chunks in 3.5 s, written the first at once then once a second
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(seen))
    assert run.answer.startswith(seen[-1]) and run.partial_text == ""
    assert any(text.startswith(seen[0]) for text in in_api)  # the API showed it as it grew
    assert api.get(f"/runs/{run.pk}").json()["partial_answer"] is None
