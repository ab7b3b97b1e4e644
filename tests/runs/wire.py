"""Provider traffic for run tests: response bodies shaped exactly as OpenAI Chat Completions and
Anthropic Messages send them, and a scripted provider behind `httpx.MockTransport` that records
every request the run loop makes. Runs reach it through the real adapters."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
from django.contrib.auth.models import User

from runs.limits import RunLimits
from runs.models import Agent, Conversation, Run
from runs.providers.base import SYNTHESIS_INSTRUCTION
from runs.runtime import execute_run
from runs.services import claim_run
from tests.factories import make_agent, start_interactive_run

PROVIDER_HOSTS = frozenset({"api.openai.com", "api.anthropic.com", "openrouter.ai"})
_ids = itertools.count(1)

Reply = httpx.Response | dict[str, Any] | Exception | Callable[[httpx.Request], Any]
Call = tuple[str, Any]  # (wire tool name, arguments: a dict, or raw text for OpenAI)


@dataclass(frozen=True)
class Wire:
    """One wire format: how its responses look and how to read the requests sent to it."""

    provider: str
    model: str

    def __str__(self) -> str:
        return self.provider

    # -- responses -------------------------------------------------------------------------

    def answer(
        self, text: str = "Briefing: three things happened today.", *, usage: tuple[int, int] = (1200, 90)
    ):
        if self.provider == "openai":
            return _openai_completion({"role": "assistant", "content": text}, "stop", usage, self.model)
        return _anthropic_message([{"type": "text", "text": text}], "end_turn", usage, self.model)

    def cut(self, text: str = "Partial answer", *, usage: tuple[int, int] = (900, 40)):
        """A response stopped by the request's output cap."""
        if self.provider == "openai":
            return _openai_completion({"role": "assistant", "content": text}, "length", usage, self.model)
        return _anthropic_message([{"type": "text", "text": text}], "max_tokens", usage, self.model)

    def tools(self, *calls: Call, usage: tuple[int, int] = (900, 40), text: str | None = None):
        if self.provider == "openai":
            message = {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": f"call_{next(_ids):024d}",
                        "type": "function",
                        "function": {
                            "name": name,
                            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                        },
                    }
                    for name, arguments in calls
                ],
            }
            return _openai_completion(message, "tool_calls", usage, self.model)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += [
            {"type": "tool_use", "id": f"toolu_{next(_ids):024d}", "name": name, "input": arguments}
            for name, arguments in calls
        ]
        return _anthropic_message(blocks, "tool_use", usage, self.model)

    def error(self, kind: str, message: str, *, code: Any = None, param: Any = None) -> dict[str, Any]:
        """An error body. OpenAI: {"error": {message, type, param, code}}; Anthropic:
        {"type": "error", "error": {type, message}} (no code or param: `kind` is its code)."""
        if self.provider == "openai":
            return {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return {"type": "error", "error": {"type": kind, "message": message}}

    # -- requests ----------------------------------------------------------------------------

    def system_texts(self, body: dict[str, Any]) -> list[str]:
        """Every system-position text of a request (OpenAI system messages, Anthropic system blocks)."""
        if self.provider == "openai":
            return [m["content"] for m in body["messages"] if m["role"] in ("system", "developer")]
        return [block["text"] for block in body.get("system", [])]

    def conversation(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The history part of a request: every message that is not in a system position."""
        return [m for m in body["messages"] if m["role"] not in ("system", "developer")]

    def text_of(self, message: dict[str, Any]) -> str:
        """The text of a history message (Anthropic content is a list of blocks)."""
        content = message["content"]
        if isinstance(content, list):
            return "".join(block.get("text", "") for block in content)
        return content or ""

    def first_prompt(self, body: dict[str, Any]) -> str:
        return self.text_of(self.conversation(body)[0])

    def output_cap(self, body: dict[str, Any]) -> int:
        """The request's output cap: OpenAI's max_completion_tokens, others' max_tokens."""
        return int(body.get("max_completion_tokens") or body.get("max_tokens") or 10**9)

    def honest(self, body: dict[str, Any], input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """Usage a real provider could report for this request: no more input tokens than it
        carries bytes of text (a token is a byte or more), no more output than its cap."""
        return min(input_tokens, text_bytes(body)), min(output_tokens, self.output_cap(body))

    def is_synthesis_only(self, body: dict[str, Any]) -> bool:
        return body.get("tool_choice") in ("none", {"type": "none"})

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, bool]]:
        """(content, is_error) of every tool result the request carries back to the model.
        OpenAI has no error flag on a tool message; the text says so."""
        if self.provider == "openai":
            return [
                (m["content"], m["content"].startswith("Error:"))
                for m in body["messages"]
                if m["role"] == "tool"
            ]
        return [
            (block["content"], bool(block.get("is_error")))
            for m in body["messages"]
            if isinstance(m["content"], list)
            for block in m["content"]
            if block["type"] == "tool_result"
        ]

    def credential(self, request: httpx.Request) -> str:
        if self.provider == "openai":
            return request.headers.get("authorization", "")
        return request.headers.get("x-api-key", "")


OPENAI = Wire("openai", "gpt-4o-2024-08-06")
ANTHROPIC = Wire("anthropic", "claude-sonnet-4-20250514")
WIRES = (OPENAI, ANTHROPIC)


def _openai_completion(
    message: dict[str, Any], finish_reason: str, usage: tuple[int, int], model: str
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{next(_ids):029d}",
        "object": "chat.completion",
        "created": 1767225600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_f33640a400",
    }


def _anthropic_message(
    content: list[dict[str, Any]], stop_reason: str, usage: tuple[int, int], model: str
) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids):024d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage[0],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": usage[1],
            "service_tier": "standard",
        },
    }


def stream_of(body: Any) -> bytes | None:
    """A whole response body as the provider streams it when asked to (`"stream": true`): OpenAI's
    `chat.completion.chunk` events (role, content in pieces, each tool call's id and name then its
    arguments in pieces, the finish reason, the usage chunk with empty `choices`, `[DONE]`) as its
    API reference and function-calling guide show them
    (https://platform.openai.com/docs/api-reference/chat-streaming,
    https://platform.openai.com/docs/guides/function-calling#streaming); Anthropic's
    `message_start` (with the input usage), each block's start, deltas (`text_delta`,
    `input_json_delta`) and stop, `message_delta` (stop reason, output usage), `message_stop`, as
    https://docs.anthropic.com/en/docs/build-with-claude/streaming shows them. None for a body that
    is not an answer (an error, a malformed body): that is sent whole."""
    if not isinstance(body, dict):
        return None
    try:
        if body.get("object") == "chat.completion" and "error" not in body:
            return b"".join(_openai_events(body))
        if body.get("type") == "message":
            return b"".join(_anthropic_events(body))
    except (KeyError, TypeError, IndexError, AttributeError):
        return None
    return None


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _openai_events(body: dict[str, Any]) -> list[bytes]:
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        data = {
            "id": body["id"],
            "object": "chat.completion.chunk",
            "created": body["created"],
            "model": body["model"],
            "system_fingerprint": body.get("system_fingerprint"),
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    def delta(value: dict[str, Any], finish: str | None = None) -> bytes:
        return chunk([{"index": 0, "delta": value, "logprobs": None, "finish_reason": finish}])

    events = [delta({"role": "assistant", "content": "", "refusal": None})]
    events += [delta({"content": piece}) for piece in _pieces(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        first = {"index": index, "id": call["id"], "type": "function"}
        events.append(
            delta({"tool_calls": [{**first, "function": {"name": function["name"], "arguments": ""}}]})
        )
        events += [
            delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(function["arguments"] or "")
        ]
    events.append(delta({}, choice["finish_reason"]))
    if "usage" in body:
        events.append(chunk([], usage=body["usage"]))
    return [*events, b"data: [DONE]\n\n"]


def _anthropic_events(body: dict[str, Any]) -> list[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    usage = dict(body["usage"]) if isinstance(body.get("usage"), dict) else None
    start_usage = None if usage is None else {**usage, "output_tokens": 1}
    message = {**body, "content": [], "stop_reason": None, "usage": start_usage}
    if usage is None:
        del message["usage"]
    events = [event("message_start", {"message": message}), event("ping", {})]
    for index, block in enumerate(body["content"]):
        if block["type"] == "tool_use":
            events.append(
                event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
            )
            arguments = json.dumps(block["input"]) if block["input"] is not None else ""
            events += [
                event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": "input_json_delta", "partial_json": p}},
                )
                for p in ["", *_pieces(arguments)]
            ]
        else:
            events.append(
                event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            )
            events += [
                event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": p}})
                for p in _pieces(block.get("text") or "")
            ]
        events.append(event("content_block_stop", {"index": index}))
    final = {"delta": {"stop_reason": body["stop_reason"], "stop_sequence": None}}
    if usage is not None:
        final["usage"] = {"output_tokens": usage.get("output_tokens")}
    return [*events, event("message_delta", final), event("message_stop", {})]


class Provider:
    """A scripted provider for `httpx.MockTransport`. Each model request gets the next reply (the
    last one repeats); a reply may be a body (HTTP 200), a response, an exception to raise, or a
    function of the request. A body is streamed when the request asks for a stream, as the
    provider would (`stream_of`), unless `streams=False`: a server that ignores `stream` and answers
    whole. Requests to any other host go to `web` (what http.fetch reaches)."""

    def __init__(
        self,
        *replies: Reply,
        web: Callable[[httpx.Request], httpx.Response] | None = None,
        streams: bool = True,
    ) -> None:
        assert replies
        self.replies = list(replies)
        self.web = web
        self.streams = streams
        self.requests: list[httpx.Request] = []
        self.fetches: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.host not in PROVIDER_HOSTS:
            self.fetches.append(request)
            assert self.web is not None, f"unexpected request to {request.url}"
            return self.web(request)
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if callable(reply) and not isinstance(reply, httpx.Response):
            reply = reply(request)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, dict):
            events = stream_of(reply) if self.streams and json.loads(request.content).get("stream") else None
            if events is not None:
                return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=events)
            return httpx.Response(200, json=reply)
        return reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def text_bytes(value: Any) -> int:
    """The bytes of every string in a request body (its text, not its JSON punctuation)."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, dict):
        return sum(text_bytes(item) for item in value.values())
    if isinstance(value, list):
        return sum(text_bytes(item) for item in value)
    return 0


def told_to_synthesize(request: httpx.Request) -> bool:
    body = json.loads(request.content)
    return body.get("tool_choice") in ("none", {"type": "none"})


def until_told(
    wire: Wire, *calls: Call, usage: tuple[int, int] = (900, 40), honest: bool = False
) -> Callable[[httpx.Request], Any]:
    """A model that asks for tools on every turn until a request is synthesis-only, then answers.
    `honest`: its usage is what a real provider could report (Wire.honest): it honours the output
    cap, and is cut short (finish_reason length) where the cap is below what it meant to write."""
    calls = calls or (("clock_now", {}),)

    def reply(request: httpx.Request) -> dict[str, Any]:
        body = json.loads(request.content)
        used = wire.honest(body, *usage) if honest else usage
        if honest and used[1] < usage[1]:
            return wire.cut("Partial answer", usage=used)
        if told_to_synthesize(request):
            return wire.answer("Final answer from the evidence gathered.", usage=used)
        return wire.tools(*calls, usage=used)

    return reply


def make_wire_agent(wire: Wire, **overrides: Any) -> Agent:
    """An agent on a real provider's wire format (default base URL), with test prices."""
    overrides.setdefault("model", wire.model)
    return make_agent(provider=wire.provider, **overrides)


def execute(
    owner: User,
    agent: Agent,
    provider: Provider,
    *,
    limits: RunLimits | None = None,
    prompt: str = "Research today's technology news and write a briefing.",
    conversation: Conversation | None = None,
    sleeps: list[float] | None = None,
) -> Run:
    """Start, claim and execute an interactive run against the scripted provider."""
    run = start_interactive_run(owner.pk, agent, prompt, limits=limits, conversation=conversation)
    claim_run(run)
    slept = sleeps if sleeps is not None else []
    with provider.client() as client:
        return execute_run(run, client=client, sleep=slept.append)


def ledger_total(*runs: Run) -> Decimal:
    from accounting.models import LedgerEntry

    entries = LedgerEntry.objects.filter(run_id__in=[run.pk for run in runs])
    return sum((entry.cost for entry in entries), Decimal(0))


def mentions_instruction(text: Any) -> bool:
    return SYNTHESIS_INSTRUCTION.split(".")[0] in json.dumps(text, default=str)


FETCH = ("http_fetch", {"url": "https://example.com/news"})


def news_page(request: httpx.Request) -> httpx.Response:
    """The page http.fetch gets from example.com in these tests."""
    return httpx.Response(200, text="<h1>Today</h1><p>Three things happened.</p>")
