"""OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, LiteLLM, OpenRouter, the simulated
provider): what differs from the other wire formats. No vendor SDK."""

from __future__ import annotations

import json
from typing import Any

from runs.providers.base import Message, ModelRequest, ModelResponse, ToolCall
from runs.providers.http import HttpAdapter
from runs.providers.parsing import parse_openai_usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIAdapter(HttpAdapter):
    path = "/chat/completions"
    default_base_url = DEFAULT_BASE_URL
    code_from = "code"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def body(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend(_wire_message(message) for message in request.messages)
        payload: dict[str, Any] = {"model": request.model, "messages": messages}
        # OpenAI itself takes the output cap as max_completion_tokens (its reasoning models refuse
        # max_tokens); the other servers that speak this format read max_tokens.
        cap = "max_completion_tokens" if self.base_url == DEFAULT_BASE_URL else "max_tokens"
        payload[cap] = request.max_output_tokens
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
        usage, defect = parse_openai_usage(body)
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
        truncated = choices[0].get("finish_reason") == "length"
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
        return ModelResponse(text, tuple(calls), usage, truncated=truncated)


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
