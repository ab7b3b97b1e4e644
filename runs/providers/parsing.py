"""Reading provider bodies defensively: malformed JSON, missing or absurd usage."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx

from runs.providers.base import ProviderError, Usage, diagnostics

# No single call reports more tokens than this; a larger count is a defect, not a bill.
MAX_TOKENS_PER_CALL = 20_000_000


def read_json(provider: str, response: httpx.Response) -> Any:
    """The JSON body; for a 200 that is not JSON (truncated, an HTML page) a transient error,
    since nothing usable or billable was received. Error statuses may have any body.
    NUL characters are replaced: PostgreSQL cannot store them in text or JSON."""
    try:
        body = response.json()
    except ValueError:
        if response.status_code == 200:
            raise ProviderError(
                transient=True,
                message="The provider's response was not valid JSON (truncated or not an API response).",
                diagnostics=diagnostics(provider, status=200),
            ) from None
        return None
    # JSON can only carry a NUL as an escape; the check keeps the common case a byte search.
    return without_nul(body) if b"\\u0000" in response.content else body


def without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    return value


MAX_REPORTED_COST = Decimal("10000")  # USD for one call: anything above is a defect, not a bill


class _Defect(Exception):
    """A usage object that cannot be billed from: missing, negative, absurd or inconsistent."""


def _count(container: Any, key: str, *, where: str, required: bool = False) -> int:
    """A token count: a non-negative JSON integer within reason. Optional counts may be absent
    or null (0); anything else unusable is a defect, never a negative or fractional charge."""
    value = container.get(key) if isinstance(container, dict) else None
    if value is None:
        if required:
            raise _Defect(f"the response's usage has no {where}{key}")
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS_PER_CALL:
        raise _Defect(f"the response's usage has an invalid {where}{key}: {str(value)[:20]!r}")
    return value


def _details(usage: dict[str, Any], key: str) -> dict[str, Any]:
    details = usage.get(key)
    if details is None:
        return {}
    if not isinstance(details, dict):
        raise _Defect(f"the response's usage.{key} is not an object")
    return details


def _reported_cost(usage: dict[str, Any]) -> Decimal | None:
    value = usage.get("cost")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Defect(f"the response's usage has an invalid cost: {str(value)[:20]!r}")
    cost = Decimal(str(value))  # the number as written, not its binary float
    if not cost.is_finite() or not 0 <= cost <= MAX_REPORTED_COST:
        raise _Defect(f"the response's usage has an invalid cost: {str(value)[:20]!r}")
    return cost


def _usage_object(body: Any) -> dict[str, Any]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        raise _Defect("the response reported no usage")
    return usage


def parse_openai_usage(body: Any) -> tuple[Usage | None, str]:
    """Chat Completions usage (OpenAI, vLLM, Ollama, LiteLLM, OpenRouter): `prompt_tokens` counts
    all input, `prompt_tokens_details.cached_tokens` the part read from the cache (and, from
    OpenRouter, `cache_write_tokens` the part written to it); `completion_tokens` counts all output,
    `completion_tokens_details.reasoning_tokens` the part spent reasoning; OpenRouter's `cost`
    is what it charged. Returns (None, why) when the usage cannot be billed from."""
    try:
        usage = _usage_object(body)
        prompt_details = _details(usage, "prompt_tokens_details")
        completion_details = _details(usage, "completion_tokens_details")
        parsed = Usage(
            input_tokens=_count(usage, "prompt_tokens", where="", required=True),
            output_tokens=_count(usage, "completion_tokens", where="", required=True),
            cache_read_tokens=_count(prompt_details, "cached_tokens", where="prompt_tokens_details."),
            cache_write_5m_tokens=_count(
                prompt_details, "cache_write_tokens", where="prompt_tokens_details."
            ),
            reasoning_tokens=_count(
                completion_details, "reasoning_tokens", where="completion_tokens_details."
            ),
            reported_cost=_reported_cost(usage),
        )
        return _consistent(parsed), ""
    except _Defect as defect:
        return None, str(defect)


def parse_anthropic_usage(body: Any) -> tuple[Usage | None, str]:
    """Messages usage: `input_tokens` (uncached), `cache_creation_input_tokens` (written, split
    by lifetime in `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`),
    `cache_read_input_tokens` and `output_tokens`, all disjoint. Returns (None, why) when the
    usage cannot be billed from."""
    try:
        usage = _usage_object(body)
        uncached = _count(usage, "input_tokens", where="", required=True)
        written = _count(usage, "cache_creation_input_tokens", where="")
        read = _count(usage, "cache_read_input_tokens", where="")
        by_lifetime = _details(usage, "cache_creation")
        five = _count(by_lifetime, "ephemeral_5m_input_tokens", where="cache_creation.")
        hour = _count(by_lifetime, "ephemeral_1h_input_tokens", where="cache_creation.")
        if by_lifetime and five + hour != written:
            raise _Defect(
                f"the response's cache writes by lifetime ({five} + {hour}) are not its "
                f"cache_creation_input_tokens ({written})"
            )
        if not by_lifetime:
            five = written  # before the 1-hour cache, every write lived 5 minutes
        parsed = Usage(
            input_tokens=uncached + written + read,
            output_tokens=_count(usage, "output_tokens", where="", required=True),
            cache_read_tokens=read,
            cache_write_5m_tokens=five,
            cache_write_1h_tokens=hour,
        )
        return _consistent(parsed), ""
    except _Defect as defect:
        return None, str(defect)


def _consistent(usage: Usage) -> Usage:
    if usage.input_tokens > MAX_TOKENS_PER_CALL:
        raise _Defect(
            f"the response's usage reports {usage.input_tokens} input tokens, more than any call has"
        )
    if usage.uncached_input_tokens < 0:
        raise _Defect("the response's cached and cache-written tokens are more than its input tokens")
    if usage.reasoning_tokens > usage.output_tokens:
        raise _Defect("the response's reasoning tokens are more than its output tokens")
    return usage
