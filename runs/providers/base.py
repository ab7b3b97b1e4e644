"""What every provider adapter speaks: requests, responses and classified errors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from runs.failures import Diagnostics

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-:/\[\]]{1,64}")


def sanitize_identifier(value: Any) -> str:
    """A provider code or parameter, kept only if it is a short identifier (SPEC §4)."""
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
    # The volatile, platform-trusted synthesis instruction (ADR-0078 decision 2). Adapters put it
    # in a system/developer position of this one request; it is never part of `messages`.
    synthesis_instruction: str | None = None
    max_output_tokens: int = 4096


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    # Set when the response was accounted but cannot be used (malformed after its usage parsed).
    defect: str = ""

    @property
    def is_empty(self) -> bool:
        """Neither text nor a tool call: not an answer (SPEC §3 rule 7)."""
        return not self.defect and not self.tool_calls and not self.text.strip()


@dataclass
class ProviderError(Exception):
    """A failed provider request, already classified (SPEC §4)."""

    transient: bool
    message: str
    diagnostics: Diagnostics
    retry_after: float | None = None

    def __str__(self) -> str:
        return self.message


class Adapter(Protocol):
    name: str

    def complete(self, request: ModelRequest) -> ModelResponse:
        """One request; raises ProviderError. No retries here."""
        ...


# The platform's synthesis instruction (ADR-0078 decision 2). It opens with a stable marker so a
# model (and the simulated provider) can recognise it.
SYNTHESIS_INSTRUCTION = (
    "FINAL ANSWER REQUIRED. This run has reached its reserved budget for a final answer. "
    "Do not call any tools. Write your final answer now, using only the evidence already in this "
    "conversation, and say briefly what you could not verify."
)
