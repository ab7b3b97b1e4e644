"""OpenAI-compatible Chat Completions over httpx (OpenAI, vLLM, Ollama, LiteLLM, OpenRouter, the
simulated provider). No vendor SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx

from runs.providers.base import Message, ModelRequest, ModelResponse, ToolCall
from runs.providers.classify import classify_response, classify_transport_error, is_error_body
from runs.providers.parsing import parse_usage, read_json

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIAdapter:
    def __init__(self, client: httpx.Client, *, name: str, base_url: str, api_key: str = "") -> None:
        self.client = client
        self.name = name
        self.url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        self._api_key = api_key

    def complete(self, request: ModelRequest) -> ModelResponse:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            response = self.client.post(self.url, json=self.body(request), headers=headers)
        except (httpx.TransportError, httpx.DecodingError) as exc:
            raise classify_transport_error(self.name, exc) from None
        body = read_json(self.name, response)
        if response.status_code != 200 or is_error_body(body):
            text = response.text if body is None else ""  # a proxy's HTML page, say
            raise classify_response(
                self.name, response.status_code, response.headers, body, code_from="code", text=text
            )
        return self.parse(body)

    def body(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend(_wire_message(message) for message in request.messages)
        payload: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.synthesis_instruction:
            # Platform-trusted and volatile: a system message on this request only.
            messages.append({"role": "system", "content": request.synthesis_instruction})
            if request.tools:
                payload["tool_choice"] = "none"
        return payload

    def parse(self, body: Any) -> ModelResponse:
        usage, defect = parse_usage(
            self.name, body, input_keys=("prompt_tokens",), output_key="completion_tokens"
        )
        if defect:
            return ModelResponse("", (), usage, defect=defect)
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ModelResponse("", (), usage, defect="the response has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            return ModelResponse("", (), usage, defect="the first choice has no message")
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            return ModelResponse(text, (), usage, defect="the response's tool calls are not a list")
        calls: list[ToolCall] = []
        for raw in raw_calls:
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                return ModelResponse(text, (), usage, defect="a tool call has no function name")
            raw_arguments = function.get("arguments") or "{}"
            calls.append(
                ToolCall(
                    id=str(raw.get("id") or f"call_{len(calls)}"),
                    name=function["name"],
                    arguments=_json_object(raw_arguments),
                    raw_arguments=raw_arguments
                    if isinstance(raw_arguments, str)
                    else json.dumps(raw_arguments),
                )
            )
        return ModelResponse(text, tuple(calls), usage)


def _json_object(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments or json.dumps(c.arguments or {})},
            }
            for c in message.tool_calls
        ]
    return wire
