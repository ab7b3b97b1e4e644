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


class Provider:
    """A scripted provider for `httpx.MockTransport`. Each model request gets the next reply (the
    last one repeats); a reply may be a body (HTTP 200), a response, an exception to raise, or a
    function of the request. Requests to any other host go to `web` (what http.fetch reaches)."""

    def __init__(self, *replies: Reply, web: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        assert replies
        self.replies = list(replies)
        self.web = web
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
