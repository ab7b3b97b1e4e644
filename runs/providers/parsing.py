"""Reading provider bodies defensively: malformed JSON, missing or absurd usage."""

from __future__ import annotations

from typing import Any

import httpx

from runs.providers.base import ProviderError, Usage, diagnostics

# No single call reports more tokens than this; a larger count is a defect, not a bill.
MAX_TOKENS_PER_CALL = 20_000_000


def read_json(provider: str, response: httpx.Response) -> Any:
    """The JSON body; for a 200 that is not JSON (truncated, an HTML page) a transient error,
    since nothing usable or billable was received. Error statuses may have any body."""
    try:
        return response.json()
    except ValueError:
        if response.status_code == 200:
            raise ProviderError(
                transient=True,
                message="The provider's response was not valid JSON (truncated or not an API response).",
                diagnostics=diagnostics(provider, status=200),
            ) from None
        return None


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
        value = usage.get(key, 0 if key != input_keys[0] and key != output_key else None)
        if value is None:
            return Usage(0, 0), f"the response's usage has no {key}"
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS_PER_CALL:
            return Usage(0, 0), f"the response's usage has an invalid {key}: {str(value)[:20]!r}"
        counts.append(value)
    return Usage(sum(counts[:-1]), counts[-1]), ""
