"""Reading provider bodies defensively: malformed JSON, missing or absurd usage."""

from __future__ import annotations

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
    return _without_nul(body) if b"\\u0000" in response.content else body


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    return value


def parse_usage(
    provider: str, body: Any, *, input_keys: tuple[str, ...], output_key: str
) -> tuple[Usage, str]:
    """Tokens from a usage object, summing several input keys (Anthropic cache tokens).

    A missing or invalid usage still yields a Usage (zero), with a defect that fails the run:
    the call is counted as a model call, never dropped unaccounted.
    """
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return Usage(0, 0), "the response reported no usage"
    counts: list[int] = []
    for key in (*input_keys, output_key):
        value = usage.get(key)
        if value is None and key not in (input_keys[0], output_key):
            value = 0  # an optional count (Anthropic's cache tokens) may be absent or null
        if value is None:
            return Usage(0, 0), f"the response's usage has no {key}"
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS_PER_CALL:
            return Usage(0, 0), f"the response's usage has an invalid {key}: {str(value)[:20]!r}"
        counts.append(value)
    return Usage(sum(counts[:-1]), counts[-1]), ""
