"""OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, LiteLLM, OpenRouter, the simulated
provider): what differs from the other wire formats. No vendor SDK."""

from __future__ import annotations

import json
from typing import Any

from runs.providers.base import Message, ModelRequest, ModelResponse, ToolCall
from runs.providers.http import HttpAdapter
from runs.providers.parsing import parse_openai_usage, without_nul
from runs.providers.stream import Parser, Watch

DEFAULT_BASE_URL = "https://api.openai.com/v1"


# Sets the attributes every HttpAdapter sets, as AnthropicAdapter does: its wire format's own values.
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
        payload: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},  # the last chunk carries the call's usage
        }
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
        return _answer(text, message.get("tool_calls") or [], choices[0].get("finish_reason"), usage)

    def parser(self, watch: Watch) -> Parser:
        return ChunkStream(watch)


class ChunkStream(Parser):
    """`chat.completion.chunk` events: content deltas, tool-call deltas assembled by their `index`
    (the first names the call, the rest append to its arguments), `finish_reason`, and the last
    chunk's `usage` (with `stream_options.include_usage`; its `choices` are empty). Reasoning deltas
    (`reasoning_content`, `reasoning`) count as output for a cut call's estimate; they are not the
    answer. A router's error once generation started (OpenRouter) is a chunk with an `error`."""

    def __init__(self, watch: Watch) -> None:
        super().__init__(watch)
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: Any = None
        self.usage_body: dict[str, Any] | None = None

    def feed(self, event: str, data: Any) -> None:
        if event == "done":
            self.done = True
            return
        if not isinstance(data, dict):
            return
        if data.get("error") is not None:
            self.error = data
            return
        if data.get("usage") is not None:
            self.usage_body = data
            self.streamed.usage, _ = parse_openai_usage(data)
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self.delta(delta)
        else:
            self.watch.chunk(output=False)
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]

    def delta(self, delta: dict[str, Any]) -> None:
        produced = False
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
            self.count(content)
            self.watch.text(content)
            produced = True
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str) and delta[key]:
                self.count(delta[key])
                produced = True
        calls = delta.get("tool_calls")
        for raw in calls if isinstance(calls, list) else []:
            if isinstance(raw, dict):
                self.tool_call_delta(raw)
                produced = True
        if not produced:
            self.watch.chunk(output=False)  # the role, or an empty delta

    def tool_call_delta(self, raw: dict[str, Any]) -> None:
        index = raw.get("index", len(self.calls))
        index = index if isinstance(index, int) and not isinstance(index, bool) else len(self.calls)
        function: dict[str, Any] = raw["function"] if isinstance(raw.get("function"), dict) else {}
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = {"id": raw.get("id"), "name": None, "arguments": []}
        if raw.get("id") and not call["id"]:
            call["id"] = raw["id"]
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str) and name:
            call["name"] = (call["name"] or "") + name
        if isinstance(arguments, str) and arguments:
            call["arguments"].append(arguments)
        self.count((name or "") + (arguments if isinstance(arguments, str) else ""), tool_call=bool(name))

    def complete(self) -> bool:
        """[DONE] came, or the stream ended after its finish reason and usage (some servers
        send no [DONE])."""
        return self.done or (self.finish is not None and self.usage_body is not None)

    def result(self) -> ModelResponse:
        usage, defect = parse_openai_usage(self.usage_body)
        if defect:
            return ModelResponse("".join(self.text), (), None, defect=defect)
        calls = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
            }
            for _, call in sorted(self.calls.items())
        ]
        return _answer(without_nul("".join(self.text)), calls, self.finish, usage)


def _answer(text: str, raw_calls: Any, finish: Any, usage: Any) -> ModelResponse:
    """A message's text and tool calls, as a whole response and an assembled stream both give them."""
    truncated = finish == "length"
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
                raw_arguments=raw_arguments if isinstance(raw_arguments, str) else json.dumps(raw_arguments),
            )
        )
    return ModelResponse(text, tuple(calls), usage, truncated=truncated)


def _json_object(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = without_nul(json.loads(raw))  # streamed pieces may have split a \u0000 escape
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
