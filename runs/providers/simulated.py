"""The simulated provider: a real OpenAI-compatible Chat Completions endpoint with scripted
behaviours chosen by model name (docs/contract.md#the-simulated-provider). Served over HTTP at
                                                 # /simulator/v1/chat/completions
and in-process through an httpx transport; either way runs reach it through the same adapter as
a real provider. Asked to stream (`"stream": true`), it answers as a real server does: server-sent
`chat.completion.chunk` events, word by word, then the finish reason, the usage chunk when
`stream_options.include_usage` asks for it, and `data: [DONE]`. A prompt's `delay=SECONDS` spreads
the answer over that long (sim-slow: 1 s); `stall=SECONDS` goes silent that long half way through;
`words=N` makes the answer N words longer (N chunks more).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx

from runs.providers import assistant
from runs.providers.base import SYNTHESIS_INSTRUCTION

MODELS = (
    "sim-research",
    "sim-tool-loop",
    "sim-ignores-reserve",
    "sim-expensive",
    "sim-rate-limited",
    "sim-quota",
    "sim-overloaded",
    "sim-server-error",
    "sim-bad-param",
    "sim-flaky",
    "sim-slow",
    "sim-assistant",
    "sim-routed",
)
# What the simulator bills, USD per million tokens of each kind (a mid-size hosted model); the
# demo's agents carry the same prices. sim-expensive writes at length at a dear output price.
PRICES = {"input": "3.00", "cache_read": "0.30", "cache_write_5m": "3.75", "output": "15.00"}
EXPENSIVE_PRICES = {**PRICES, "output": "300.00"}
EXPENSIVE_OUTPUT = 2_000  # tokens: USD 0.60 a call at its output price, within an agent's default cap
PER_MESSAGE_TOKENS = 60  # fewer tokens than the bytes of a message and its keys: a token is a byte or more
MAX_DELAY_SECONDS = 600
_MARKER = SYNTHESIS_INSTRUCTION.split(".")[0]
_DELAY = re.compile(r"delay=(\d+(?:\.\d+)?)")
_WORDS = re.compile(r"words=(\d{1,5})")
_STALL = re.compile(r"stall=(\d+(?:\.\d+)?)")

Reply = tuple[int, dict[str, str], dict[str, Any]]


class _SeenTurns:
    """Which turns sim-flaky has already failed once (bounded, thread-safe)."""

    def __init__(self, size: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def first_time(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
            return True


_flaky_turns = _SeenTurns()


def respond(body: Any) -> Reply:
    """The simulator itself: a request body in, (status, headers, JSON body) out."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _error(
            400, "invalid_request_error", "A JSON body with a messages list is required.", param="messages"
        )
    model = body.get("model")
    messages = [m for m in body["messages"] if isinstance(m, dict)]
    if model == "sim-rate-limited":
        return _error(
            429, "requests", "Rate limit reached for requests.", code="rate_limit_exceeded", retry_after="1"
        )
    if model == "sim-quota":
        return _error(
            429, "insufficient_quota", "You exceeded your current quota.", code="insufficient_quota"
        )
    if model == "sim-overloaded":
        return 529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    if model == "sim-server-error":
        return _error(
            500, "server_error", "The server had an error while processing your request.", code="server_error"
        )
    if model == "sim-bad-param":
        prompt = _last_user_text(messages)
        return _error(
            400, "invalid_request_error", f"Invalid content: {prompt!r}", param="messages[1].content"
        )
    if model == "sim-flaky" and _flaky_turns.first_time(_turn_key(body)):
        return _error(503, "server_error", "Service temporarily unavailable.", code="service_unavailable")
    if model not in MODELS:
        return _error(
            404, "invalid_request_error", f"The model {model!r} does not exist.", code="model_not_found"
        )
    return 200, {}, _completion(str(model), body, messages)


def _completion(model: str, body: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    turn = _turn(messages)
    told_to_synthesize = body.get("tool_choice") == "none" or any(
        m.get("role") in ("system", "developer") and _MARKER in str(m.get("content")) for m in messages
    )
    wants_tool = {
        "sim-research": turn < 2,
        "sim-routed": turn < 2,
        "sim-expensive": turn < 2,
        "sim-flaky": turn < 2,
        "sim-tool-loop": True,
        "sim-ignores-reserve": True,
    }.get(model, False)
    if told_to_synthesize and model != "sim-ignores-reserve":
        wants_tool = False
    scripted = None
    if model == "sim-assistant":
        scripted = assistant.reply(messages, _tool_names(body.get("tools")), synthesize=told_to_synthesize)
        wants_tool = bool(scripted.get("tool_calls"))
    cap = _output_cap(body)
    # An answer of `words=N` words (a long briefing, streamed in N chunks), else a short one.
    words = _WORDS.search(_last_user_text(messages))
    filler = int(words.group(1)) if words and not wants_tool else 0
    planned = EXPENSIVE_OUTPUT if model == "sim-expensive" else (60 if wants_tool else max(180, filler))
    cut = planned > cap
    usage = _usage(model, messages, turn, completion=min(planned, cap), thinking=wants_tool and not cut)
    if cut:  # stopped by max_tokens: what fits of the answer, no tool call (its JSON would be cut)
        return _reply(
            model, turn, {"role": "assistant", "content": f"Briefing ({model}): partial…"}, "length", usage
        )
    if scripted is not None:
        message: dict[str, Any] = scripted
        finish = "tool_calls" if wants_tool else "stop"
    elif wants_tool:
        tool, arguments = _pick_tool(body.get("tools"), _last_user_text(messages))
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}_{_turn_key(body)[:8]}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(arguments)},
                }
            ],
        }
        finish = "tool_calls"
    else:
        evidence = sum(1 for m in messages if m.get("role") == "tool")
        message = {
            "role": "assistant",
            "content": (
                f"Briefing ({model}): summary written from {evidence} tool result(s) after {turn} turn(s)."
                + "".join(f" point{n}" for n in range(filler))
            ),
        }
        finish = "stop"
    return _reply(model, turn, message, finish, usage)


def _reply(
    model: str, turn: int, message: dict[str, Any], finish: str, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-sim-{turn}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _output_cap(body: dict[str, Any]) -> int:
    """The request's output cap, as OpenAI (max_completion_tokens) or others (max_tokens) send it."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1_000_000


def _usage(
    model: str, messages: list[dict[str, Any]], turn: int, *, completion: int, thinking: bool
) -> dict[str, Any]:
    """Usage as a caching provider reports it, in the OpenAI-compatible shape (OpenRouter's, with
    cache writes): the first call of a run writes its prompt to the cache; later calls read the
    part they share with the previous one. Tool-asking turns spend part of their output reasoning.
    sim-routed also reports what it charged (`cost`), as a router does."""
    size = sum(len(str(m.get("content") or "")) for m in messages)
    prompt = PER_MESSAGE_TOKENS + size // 4
    cached = (prompt * 3) // 4 if turn > 0 else 0
    written = prompt - PER_MESSAGE_TOKENS if turn == 0 else prompt - cached - PER_MESSAGE_TOKENS
    written = max(0, min(written, prompt - cached))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "completion_tokens_details": {"reasoning_tokens": completion // 3 if thinking else 0},
    }
    if model == "sim-routed":
        usage["cost"] = float(_charge(PRICES, prompt, cached, written, completion))
    return usage


def _charge(prices: dict[str, str], prompt: int, cached: int, written: int, completion: int) -> Decimal:
    per = {kind: Decimal(price) / 1_000_000 for kind, price in prices.items()}
    uncached = prompt - cached - written
    return (
        uncached * per["input"]
        + cached * per["cache_read"]
        + written * per["cache_write_5m"]
        + completion * per["output"]
    ).quantize(Decimal("0.000001"))


def _turn(messages: list[dict[str, Any]]) -> int:
    """Assistant turns since the last user message: the simulator's script position."""
    turn = 0
    for message in messages:
        if message.get("role") == "user":
            turn = 0
        elif message.get("role") == "assistant":
            turn += 1
    return turn


def _turn_key(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True, default=str).encode()).hexdigest()


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def _tool_names(tools: Any) -> list[str]:
    return [
        t["function"]["name"]
        for t in (tools if isinstance(tools, list) else [])
        if isinstance(t, dict)
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    ]


def _pick_tool(tools: Any, prompt: str) -> tuple[str, dict[str, Any]]:
    """clock_now when offered; agent_delegate when the prompt asks to delegate; else the first."""
    names = _tool_names(tools)
    if "agent_delegate" in names and "delegate" in prompt.lower():
        return "agent_delegate", {"task": "Collect supporting evidence for the briefing."}
    if "clock_now" in names or not names:
        return "clock_now", {}
    if names[0] == "http_fetch":
        return "http_fetch", {"url": "https://example.com/"}
    return names[0], {}


def _error(
    status: int,
    kind: str,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    retry_after: str = "",
) -> Reply:
    headers = {"retry-after": retry_after} if retry_after else {}
    return status, headers, {"error": {"message": message, "type": kind, "param": param, "code": code}}


def pacing(body: Any) -> tuple[float, float]:
    """How long the answer takes (sim-slow 1 s, or the prompt's `delay=SECONDS`) and how long it
    goes silent half way (`stall=SECONDS`), in seconds."""
    messages = body.get("messages") if isinstance(body, dict) else None
    text = _last_user_text([m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [])
    delay = _DELAY.search(text)
    stall = _STALL.search(text)
    seconds = float(delay.group(1)) if delay else 1.0 if body.get("model") == "sim-slow" else 0.0
    return min(seconds, MAX_DELAY_SECONDS), min(float(stall.group(1)) if stall else 0.0, MAX_DELAY_SECONDS)


def wants_stream(body: Any) -> bool:
    return isinstance(body, dict) and body.get("stream") is True


def chunks(payload: dict[str, Any], *, usage: bool) -> list[bytes]:
    """A completion as the server-sent events a streaming server writes: a role chunk, the content
    word by word, each tool call (its id and name, then its arguments in pieces), the finish
    reason, the usage chunk if asked for, and `[DONE]`."""
    choice = payload["choices"][0]
    message = choice["message"]

    def event(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
        chunk = {
            "id": payload["id"],
            "object": "chat.completion.chunk",
            "created": payload["created"],
            "model": payload["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else [],
            **extra,
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    events = [event({"role": "assistant", "content": None})]
    events += [event({"content": word}) for word in re.findall(r"\s*\S+", message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        events.append(
            event(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        arguments = function["arguments"]
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            if piece:
                events.append(event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    events.append(event({}, choice["finish_reason"]))
    if usage:
        events.append(event(None, usage=payload["usage"]))
    events.append(b"data: [DONE]\n\n")
    return events


def paced(events: list[bytes], delay: float, stall: float, wait: Any) -> Iterator[bytes]:
    """The events spread over `delay` seconds, silent `stall` seconds half way. `wait(seconds)`
    sleeps, and answers True when the reader went away (then nothing more is sent). Each event is
    due at its own moment from the start, so the answer takes `delay` however late each sleep wakes."""
    step = delay / len(events) if events else 0.0
    start = time.monotonic()
    for index, chunk in enumerate(events):
        if index == len(events) // 2 and stall:
            if wait(stall):
                return
            start += stall
        due = start + (index + 1) * step - time.monotonic()
        if due > 0 and wait(due):
            return
        yield chunk


class _Stream(httpx.SyncByteStream):
    """The in-process simulator's answer as it is written. Closing it (the reader went away, or a
    call's watch cut it) ends any wait at once."""

    def __init__(self, events: list[bytes], delay: float, stall: float) -> None:
        self.closed = threading.Event()
        self.events = paced(events, delay, stall, self.closed.wait)

    def __iter__(self) -> Iterator[bytes]:
        yield from self.events

    def close(self) -> None:
        self.closed.set()


def _handle(request: httpx.Request) -> httpx.Response:
    try:
        body = json.loads(request.content or b"null")
    except ValueError:
        body = None
    status, headers, payload = respond(body)
    delay, stall = pacing(body) if status == 200 else (0.0, 0.0)
    if status == 200 and wants_stream(body):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        stream = _Stream(chunks(payload, usage=usage), delay, stall)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    time.sleep(delay + stall)
    return httpx.Response(status, headers=headers, json=payload)


def transport() -> httpx.MockTransport:
    """The simulator in-process: an httpx transport answering every request with `respond`."""
    return httpx.MockTransport(_handle)
