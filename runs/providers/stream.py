"""What a streamed provider call shares across wire formats (docs/decisions/0006-streaming.md):
reading server-sent events, the call's watch, and the cut.

A call streams: the adapter reads events as the provider writes them and hands each wire format's
parser (runs.providers.openai, runs.providers.anthropic) one event at a time; the loop still gets one
ModelResponse. While it reads, the call's `Watch` hears of every chunk and of the text as it is
written (the loop shows it to the owner), and may cut the call: Stop, the run's deadline, or a
provider silent for too long (runs.watch does that from outside the reading thread, by shutting the
socket). A call that ends before its usage arrived raises `CutCall`: the provider billed it all the
same, and the loop charges an estimate that never undercounts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from runs.failures import Diagnostics
from runs.providers.base import ModelResponse, ProviderError, Usage

# What a tool call adds to the output beyond the bytes streamed of it: the markup a model writes
# around it (`<tool_call>{"name": …, "arguments": …}</tool_call>`), which servers parse out of the
# stream before they send the call. A cut call's estimate counts it (runs.bounds.estimate).
TOOL_CALL_OVERHEAD_TOKENS = 32


class Watch:
    """What the reading adapter tells about a call in progress, and asks: whether it was cut.
    This base watches nothing and never cuts (a call made outside a run's loop); runs.watch's
    `CallWatch` is the loop's."""

    cut_reason = ""  # set by whoever cut the call: "stopped", "deadline", "idle", "first_token"

    def sending(self) -> None:
        """The request is about to be sent (each attempt of it)."""

    def opened(self, response: httpx.Response) -> None:
        """The response's headers arrived: from now on the call can be cut."""

    def chunk(self, *, output: bool) -> None:
        """A chunk arrived; `output`: it carried generated text or a tool call."""

    def text(self, delta: str) -> None:
        """More of the answer's text."""

    def read_timeout(self) -> float | None:
        """How long one read may wait (None: httpx's timeout for the client)."""
        return None

    def closed(self) -> None:
        """The call ended, answered or not."""


@dataclass
class Streamed:
    """What a call has produced so far, for the estimate if it is cut: the output tokens it has
    shown (each chunk is at least one token, each byte at most one: the larger count), and the
    usage if the provider reported it before the cut."""

    chunks: int = 0
    text_bytes: int = 0
    tool_calls: int = 0
    usage: Usage | None = None

    @property
    def output_tokens(self) -> int:
        return max(self.chunks, self.text_bytes) + self.tool_calls * TOOL_CALL_OVERHEAD_TOKENS


class CutCall(ProviderError):
    """A call that ended before it was whole: billed by the provider (it was sent, and may have
    generated), charged by the loop with the usage reported before the cut, or an estimate.
    `ours`: we cut it (Stop, the deadline, a timeout), so the provider may have gone on
    generating up to the request's cap; otherwise the provider or the network cut it."""

    def __init__(
        self,
        *,
        transient: bool,
        message: str,
        diagnostics: Diagnostics,
        reason: str,
        ours: bool,
        streamed: Streamed,
    ) -> None:
        super().__init__(transient=transient, message=message, diagnostics=diagnostics)
        self.reason = reason
        self.ours = ours
        self.streamed = streamed


class Parser:
    """One wire format's stream, fed event by event: the answer as it forms, and at the end the
    ModelResponse the loop sees. `error` is set when the provider sent an error event."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.streamed = Streamed()
        self.error: Any = None  # the error event's body, as a JSON error body
        self.done = False  # the stream said it ended ([DONE], message_stop)

    def feed(self, event: str, data: Any) -> None:
        raise NotImplementedError

    def result(self) -> ModelResponse:
        raise NotImplementedError

    def complete(self) -> bool:
        """Whether the stream ended whole (not cut): its end event came."""
        return self.done

    def started(self) -> bool:
        """Whether generation began: an error before it is an ordinary refused request."""
        return self.streamed.chunks > 0 or self.streamed.usage is not None

    def count(self, text: str = "", *, tool_call: bool = False) -> None:
        """Some output arrived: count it for the estimate and tell the watch."""
        self.streamed.chunks += 1
        if text:
            self.streamed.text_bytes += len(text.encode())
        if tool_call:
            self.streamed.tool_calls += 1
        self.watch.chunk(output=True)


def events(response: httpx.Response, watch: Watch) -> Iterator[tuple[str, Any]]:
    """Server-sent events as (event name, JSON data); comments and keep-alives are skipped (but tell
    the watch a chunk came), `data: [DONE]` ends the stream, data that is not JSON is skipped. NUL
    characters become U+FFFD: PostgreSQL cannot store them."""
    name, data = "", list[str]()
    for line in response.iter_lines():
        if not line:
            if data:
                payload = "\n".join(data)
                if payload.strip() == "[DONE]":
                    yield "done", None
                    return
                parsed = _json(payload)
                if parsed is not None:
                    yield name or "message", parsed
            name, data = "", []
            continue
        if line.startswith(":"):  # a comment: OpenRouter's ": OPENROUTER PROCESSING"
            watch.chunk(output=False)
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data:  # a last event without its blank line
        parsed = _json("\n".join(data))
        if parsed is not None:
            yield name or "message", parsed


def _json(text: str) -> Any:
    try:
        value = json.loads(text.replace("\\u0000", "\\ufffd"))
    except ValueError:
        return None
    return value


def is_event_stream(response: httpx.Response) -> bool:
    kind: str = response.headers.get("content-type", "")
    return kind.split(";")[0].strip().lower() == "text/event-stream"
