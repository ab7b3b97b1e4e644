"""What every provider adapter speaks: requests, responses and classified errors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from accounting.tokens import TokensByKind
from runs.failures import Diagnostics

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-:/\[\]]{1,64}")


def sanitize_identifier(value: Any) -> str:
    """A provider code or parameter, kept only if it is a short identifier
    (docs/contract.md#providers-and-failures)."""
    # fullmatch, not `^…$`: `$` also matches before a final newline.
    if isinstance(value, str) and _IDENTIFIER.fullmatch(value):
        return value
    return ""


def sanitize_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def diagnostics(provider: str, *, code: Any = None, status: Any = None, parameter: Any = None) -> Diagnostics:
    return Diagnostics(
        provider=sanitize_identifier(provider),
        provider_code=sanitize_identifier(code),
        http_status=sanitize_status(status),
        provider_parameter=sanitize_identifier(parameter),
    )


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to a model: wire-safe name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None  # None: the model sent arguments that are not a JSON object
    raw_arguments: str = ""


@dataclass(frozen=True)
class Message:
    """One history message in a provider-neutral shape."""

    role: str  # "user", "assistant" or "tool"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    tool_name: str = ""
    is_error: bool = False


@dataclass(frozen=True)
class ModelRequest:
    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    # The volatile, platform-trusted synthesis instruction (docs/decisions/0001, point 2). Adapters put
    # it in a system/developer position of this one request; it is never part of `messages`.
    synthesis_instruction: str | None = None
    # The output cap on the wire (max_tokens / max_completion_tokens): at most the agent's maximum
    # output per call, less when the dollars left pay for less (docs/contract.md#bounded-before-the-call).
    max_output_tokens: int = 2048


@dataclass(frozen=True)
class Usage(TokensByKind):
    """What one call used, by the kinds providers bill apart (docs/contract.md#usage-by-kind).
    `input_tokens` is all input, and the cache counts are parts of it; `output_tokens` is all output,
    reasoning included. `reported_cost`: what the provider says it charged (OpenRouter)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0
    reported_cost: Decimal | None = None


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    # None: the response's usage is missing or cannot be billed from (`defect` says why); the loop
    # then charges the call's worst case and fails the run closed.
    usage: Usage | None
    # Set when the response cannot be used (malformed, or its usage is unusable).
    defect: str = ""
    # The output stopped at the request's max_output_tokens (finish_reason "length",
    # stop_reason "max_tokens").
    truncated: bool = False

    @property
    def is_empty(self) -> bool:
        """Neither text nor a tool call: not an answer (docs/contract.md#the-run-loop, rule 7)."""
        return not self.defect and not self.tool_calls and not self.text.strip()


@dataclass
class ProviderError(Exception):
    """A failed provider request, already classified (docs/contract.md#providers-and-failures)."""

    transient: bool
    message: str
    diagnostics: Diagnostics
    retry_after: float | None = None

    def __str__(self) -> str:
        return self.message


class Adapter(Protocol):
    name: str

    def complete(self, request: ModelRequest, watch: Any = None) -> ModelResponse:
        """One request, streamed, told to `watch` (runs.providers.stream.Watch) as it comes;
        raises ProviderError (CutCall for a call that was sent and did not end whole). No retries
        here."""
        ...


# The platform's synthesis instruction (docs/decisions/0001, point 2). It opens with a stable marker so a
# model (and the simulated provider) can recognise it.
SYNTHESIS_INSTRUCTION = (
    "FINAL ANSWER REQUIRED. This run has reached its reserved budget for a final answer. "
    "Do not call any tools. Write your final answer now, using only the evidence already in this "
    "conversation, and say briefly what you could not verify."
)
