"""Anthropic Messages over httpx. No vendor SDK."""

from __future__ import annotations

from typing import Any

import httpx

from runs.providers.base import Message, ModelRequest, ModelResponse, ToolCall
from runs.providers.classify import classify_response, classify_transport_error, is_error_body
from runs.providers.parsing import parse_usage, read_json

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicAdapter:
    def __init__(self, client: httpx.Client, *, name: str, base_url: str, api_key: str = "") -> None:
        self.client = client
        self.name = name
        self.url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"
        self._api_key = api_key

    def complete(self, request: ModelRequest) -> ModelResponse:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        try:
            response = self.client.post(self.url, json=self.body(request), headers=headers)
        except (httpx.TransportError, httpx.DecodingError) as exc:
            raise classify_transport_error(self.name, exc) from None
        body = read_json(self.name, response)
        # A 200 can still carry an error event ({"type": "error", "error": {...}}).
        if response.status_code != 200 or is_error_body(body):
            text = response.text if body is None else ""  # a proxy's HTML page, say
            raise classify_response(
                self.name, response.status_code, response.headers, body, code_from="type", text=text
            )
        return self.parse(body)

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

    def parse(self, body: dict[str, Any]) -> ModelResponse:
        usage, defect = parse_usage(
            self.name,
            body,
            input_keys=("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
            output_key="output_tokens",
        )
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
        return ModelResponse("\n".join(texts), tuple(calls), usage)


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
