"""Anthropic Messages: what differs from the other wire formats. No vendor SDK."""

from __future__ import annotations

import json
from typing import Any

from runs.providers.base import Message, ModelRequest, ModelResponse, ToolCall
from runs.providers.http import HttpAdapter
from runs.providers.parsing import parse_anthropic_usage, without_nul
from runs.providers.stream import Parser, Watch

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicAdapter(HttpAdapter):
    path = "/v1/messages"
    default_base_url = DEFAULT_BASE_URL
    code_from = "type"

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def body(self, request: ModelRequest) -> dict[str, Any]:
        system: list[dict[str, str]] = []
        if request.system:
            system.append({"type": "text", "text": request.system})
        if request.synthesis_instruction:
            # Platform-trusted and volatile: a system block of this request only.
            system.append({"type": "text", "text": request.synthesis_instruction})
        payload: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "messages": _wire_messages(request.messages),
            "stream": True,
        }
        if system:
            payload["system"] = system
        if request.tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
            if request.synthesis_instruction:
                payload["tool_choice"] = {"type": "none"}
        return payload

    def parse(self, body: Any) -> ModelResponse:
        usage, defect = parse_anthropic_usage(body)
        if defect:
            return ModelResponse("", (), usage, defect=defect)
        return _answer(body.get("content"), body.get("stop_reason"), usage)

    def parser(self, watch: Watch) -> Parser:
        return EventStream(watch)


class EventStream(Parser):
    """Messages SSE: `message_start` (the message, with its input usage), for each content block a
    `content_block_start`, `content_block_delta`s (`text_delta`, a tool's `input_json_delta`
    pieces, `thinking_delta`) and a `content_block_stop`; `message_delta` (the stop reason and the
    cumulative usage), `message_stop`; `ping`s; and an `error` event, which can come at any point
    (`overloaded_error` mid-stream)."""

    def __init__(self, watch: Watch) -> None:
        super().__init__(watch)
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stop_reason: Any = None

    def feed(self, event: str, data: Any) -> None:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "error" or event == "error":
            self.error = data
        elif kind == "message_start":
            message = data.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self.usage.update(usage)
            self.watch.chunk(output=False)
        elif kind == "content_block_start":
            self.block_start(data)
        elif kind == "content_block_delta":
            self.block_delta(data)
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
            if isinstance(data.get("usage"), dict):
                self.usage.update(data["usage"])  # cumulative counts: the latest win
                self.streamed.usage, _ = parse_anthropic_usage({"usage": self.usage})
            self.watch.chunk(output=False)
        elif kind == "message_stop":
            self.done = True
        else:  # ping, content_block_stop, what a later API version adds
            self.watch.chunk(output=False)

    def block_start(self, data: dict[str, Any]) -> None:
        index, block = data.get("index"), data.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            return
        self.blocks[index] = {**block, "partial": []}
        if block.get("type") == "tool_use":
            self.count(str(block.get("name") or ""), tool_call=True)
        elif isinstance(block.get("text"), str) and block["text"]:
            self.count(block["text"])
            self.watch.text(block["text"])

    def block_delta(self, data: dict[str, Any]) -> None:
        block, delta = self.blocks.get(data.get("index")), data.get("delta")  # type: ignore[arg-type]
        if block is None or not isinstance(delta, dict):
            self.watch.chunk(output=False)
            return
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = (block.get("text") or "") + delta["text"]
            self.count(delta["text"])
            self.watch.text(delta["text"])
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            block["partial"].append(delta["partial_json"])
            self.count(delta["partial_json"])
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            self.count(delta["thinking"])
        else:  # signature_delta, citations
            self.watch.chunk(output=False)

    def result(self) -> ModelResponse:
        usage, defect = parse_anthropic_usage({"usage": self.usage} if self.usage else None)
        if defect:
            return ModelResponse("", (), None, defect=defect)
        blocks = []
        for _, block in sorted(self.blocks.items()):
            if block.get("type") == "tool_use" and block["partial"]:
                block["input"] = _json_or_none("".join(block["partial"]))
            blocks.append(block)
        return _answer(without_nul(blocks), self.stop_reason, usage)


def _json_or_none(text: str) -> Any:
    try:
        return without_nul(json.loads(text))  # pieces may have split a \u0000 escape
    except ValueError:
        return None


def _answer(blocks: Any, stop_reason: Any, usage: Any) -> ModelResponse:
    """A message's content blocks as text and tool calls, as a whole response and an assembled
    stream both give them."""
    if not isinstance(blocks, list):
        return ModelResponse("", (), usage, defect="the response has no content blocks")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in blocks:
        if not isinstance(block, dict):
            return ModelResponse("", (), usage, defect="a content block is not an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            if not isinstance(block.get("name"), str):
                return ModelResponse("", (), usage, defect="a tool_use block has no name")
            arguments = block.get("input")
            calls.append(
                ToolCall(
                    id=str(block.get("id") or f"toolu_{len(calls)}"),
                    name=block["name"],
                    arguments=arguments if isinstance(arguments, dict) else None,
                )
            )
    truncated = stop_reason == "max_tokens"
    return ModelResponse("\n".join(texts), tuple(calls), usage, truncated=truncated)


def _wire_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Neutral history into Anthropic turns: tool results travel as user turns of
    `tool_result` blocks, consecutive ones merged, since roles must alternate."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                block["is_error"] = True
            if wire and wire[-1]["role"] == "user" and isinstance(wire[-1]["content"], list):
                wire[-1]["content"].append(block)
            else:
                wire.append({"role": "user", "content": [block]})
        elif message.role == "assistant":
            content: list[dict[str, Any]] = []
            if message.content:
                content.append({"type": "text", "text": message.content})
            content.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments or {}}
                for c in message.tool_calls
            )
            wire.append({"role": "assistant", "content": content or [{"type": "text", "text": ""}]})
        else:
            wire.append({"role": "user", "content": [{"type": "text", "text": message.content}]})
    return wire
