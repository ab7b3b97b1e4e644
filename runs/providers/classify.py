"""Provider failure classification on structured fields only, never on message text (SPEC §4).

Order: no response -> `x-should-retry` -> HTTP status -> `error.type` / `error.code`. A
`Retry-After` longer than the cap cannot be honoured inside a run, so it is permanent.
"""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, datetime
from typing import Any

import httpx

from runs.providers.base import ProviderError, diagnostics

RETRY_AFTER_CAP_SECONDS = 60.0
TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "rate_limit_exceeded", "server_error", "overloaded"}
)
_QUOTA_CODES = frozenset(
    {"insufficient_quota", "credit_balance_exhausted", "billing_error", "billing_hard_limit_reached"}
)
_QUOTA_PATTERN = re.compile(r"^[a-z0-9_]+_(spend|usage)_limit_exceeded$")


def is_quota_code(value: Any) -> bool:
    return isinstance(value, str) and (value in _QUOTA_CODES or bool(_QUOTA_PATTERN.match(value)))


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date); None if absent/bad."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_fields(body: Any) -> tuple[str, str, str, str]:
    """(type, code, param, message) from an OpenAI- or Anthropic-shaped error body."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        return "", "", "", error
    if not isinstance(error, dict):
        return "", "", "", ""
    kind = error.get("type")
    code = error.get("code")
    param = error.get("param")
    message = error.get("message")
    return (
        kind if isinstance(kind, str) else "",
        code if isinstance(code, str) else "",
        param if isinstance(param, str) else "",
        message if isinstance(message, str) else "",
    )


def classify_transport_error(provider: str, exc: httpx.TransportError | httpx.DecodingError) -> ProviderError:
    """No usable response: a connection or timeout error, or a body whose content encoding is
    broken (nothing readable, so nothing billable, arrived). Transient."""
    if isinstance(exc, httpx.DecodingError):
        message = f"The provider's response could not be decoded ({type(exc).__name__})."
    else:
        kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
        message = f"No response from the provider ({kind}: {type(exc).__name__})."
    return ProviderError(
        transient=True,
        message=message,
        diagnostics=diagnostics(provider),
    )


def classify_response(
    provider: str, status: int, headers: httpx.Headers, body: Any, *, code_from: str
) -> ProviderError:
    """A provider error response, classified. `code_from` is "code" for OpenAI-compatible
    adapters (error.code, else error.type) and "type" for Anthropic (error.type)."""
    kind, code, param, message = error_fields(body)
    provider_code = (code or kind) if code_from == "code" else kind
    retry_after = parse_retry_after(headers)
    transient = _is_transient(status, headers, kind, code)
    if transient and retry_after is not None and retry_after > RETRY_AFTER_CAP_SECONDS:
        transient = False
        message = (message + " " if message else "") + f"(Retry-After {retry_after:.0f} s is above the cap.)"
    return ProviderError(
        transient=transient,
        message=message or f"The provider answered HTTP {status}.",
        diagnostics=diagnostics(provider, code=provider_code, status=status, parameter=param),
        retry_after=retry_after,
    )


def _is_transient(status: int, headers: httpx.Headers, kind: str, code: str) -> bool:
    should_retry = (headers.get("x-should-retry") or "").strip().lower()
    if should_retry in ("true", "false"):
        return should_retry == "true"
    if status == 429:
        return not (is_quota_code(code) or is_quota_code(kind))
    if status == 200:  # an error event inside a successful response
        return kind in TRANSIENT_ERROR_TYPES or code in TRANSIENT_ERROR_TYPES
    return bool(status in TRANSIENT_STATUSES or status >= 500)
