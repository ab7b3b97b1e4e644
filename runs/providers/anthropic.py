"""Anthropic Messages: what differs from the other wire formats. No vendor SDK."""

from __future__ import annotations

from typing import Any

from runs.providers.base import Message, ModelRequest, ModelResponse, ToolCall
from runs.providers.http import HttpAdapter
from runs.providers.parsing import parse_anthropic_usage

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
        blocks = body.get("content")
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
        truncated = body.get("stop_reason") == "max_tokens"
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
