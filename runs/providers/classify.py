"""Provider failure classification on structured fields only, never on message text
(docs/contract.md#providers-and-failures).

Order: no response -> `x-should-retry` -> HTTP status -> `error.type` / `error.code`. A
`Retry-After` longer than the cap cannot be honoured inside a run, so it is permanent.

Error bodies come in several shapes, and each is read: `{"error": {...}}` (OpenAI, Anthropic,
Azure, OpenRouter, Groq, llama.cpp, LiteLLM), a list of those (Gemini's OpenAI-compatible
endpoint), a flat `{"object": "error", "message": ...}` (vLLM, SGLang, Mistral), `{"error": "..."}`
(Ollama, TGI with its `error_type`), FastAPI's and RFC 9457's `detail` / `title`, a bare
`{"message": ...}`, and HTML or text pages from the proxies in front (Cloudflare, nginx, Envoy), of
which only a short line is kept.
"""

from __future__ import annotations

import email.utils
import html
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

# The quota and billing codes are part of the failure vocabulary (runs.failures).
from runs.failures import is_quota_code
from runs.providers.base import ProviderError, diagnostics

RETRY_AFTER_CAP_SECONDS = 60.0
TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "rate_limit_exceeded", "server_error", "overloaded"}
)
MAX_PAGE_LINE = 120  # of an HTML or text error page, what the failure message keeps
MAX_STRUCTURED_MESSAGE = 500  # of a message that is itself JSON (Mistral's validation details)


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


@dataclass(frozen=True)
class ErrorFields:
    """What an error body says, whatever its shape."""

    kind: str = ""  # error.type
    code: str = ""  # error.code, when it is text
    status: int | None = None  # error.code, when it is an HTTP status (400-599)
    param: str = ""
    detail_code: str = ""  # error.details.error_code (Anthropic's tier spend cap)
    message: str = ""


def error_fields(body: Any) -> ErrorFields:
    error = _error_object(body)
    if isinstance(error, str):  # Ollama, TGI (with its error_type), gateways
        kind = body.get("error_type") if isinstance(body, dict) else None
        return ErrorFields(kind=_text(kind), message=error)
    if not isinstance(error, dict):
        return ErrorFields(message=_problem_detail(body))
    code, details = error.get("code"), error.get("details")
    return ErrorFields(
        kind=_text(error.get("type")),
        code=_text(code),
        status=code if _is_error_status(code) else None,
        param=_text(error.get("param")),
        detail_code=_text(details.get("error_code")) if isinstance(details, dict) else "",
        message=_message(error.get("message")),
    )


def is_error_body(body: Any) -> bool:
    """Whether a 200 body reports a failure instead of an answer."""
    if not isinstance(body, dict):
        return True  # no answer is a list or a scalar (Gemini sends a list of errors)
    if body.get("type") == "error" or body.get("object") == "error":
        return True
    if "error" not in body:
        return False
    # A router that fails once generation started (OpenRouter) may send the choices it had and
    # an error whose code is the HTTP status that happened; that is a failure, not an answer.
    return ("choices" not in body and "content" not in body) or error_fields(body).status is not None


def _error_object(body: Any) -> Any:
    if isinstance(body, list):  # Gemini's OpenAI-compatible endpoint: [{"error": {...}}]
        body = body[0] if body else None
    if not isinstance(body, dict):
        return None
    if body.get("object") == "error":  # vLLM, SGLang, Mistral: the body is the error
        return body
    return body.get("error")


def _is_error_status(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _message(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):  # Mistral sends its validation details as the message
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))[:MAX_STRUCTURED_MESSAGE]
    return ""


def _problem_detail(body: Any) -> str:
    """FastAPI's {"detail": "..."}, RFC 9457 problem details (NVIDIA's API catalog, Cloudflare) and
    a bare {"message": "..."} (Mistral's gateway)."""
    if not isinstance(body, dict):
        return ""
    for key in ("detail", "title", "message"):
        if isinstance(body.get(key), str) and body[key]:
            return str(body[key])
    return ""


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_HEADING = re.compile(r"<h1[^>]*>(.*?)</h1>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def page_line(text: str) -> str:
    """A short readable line from an error body that is not JSON: an HTML page's title (or its
    first heading, or its text), or a text body's first line."""
    head = text[:8192]
    found = _TITLE.search(head) or _HEADING.search(head)
    if found:
        line = found.group(1)
    elif "<" in head:
        line = _TAG.sub(" ", head)
    else:
        line = head.strip().split("\n", 1)[0]
    line = " ".join(html.unescape(_TAG.sub(" ", line)).split())
    return line[:MAX_PAGE_LINE]


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
    provider: str, status: int, headers: httpx.Headers, body: Any, *, code_from: str, text: str = ""
) -> ProviderError:
    """A provider error response, classified. `code_from` is "code" for OpenAI-compatible
    adapters (error.code, else error.type) and "type" for Anthropic (error.type). `text` is the
    body when it was not JSON (an HTML page from a proxy)."""
    fields = error_fields(body)
    if status == 200 and fields.status is not None:
        # A router that had started generating reports the upstream's failure inside a 200
        # (OpenRouter): the status in the body is the one that happened, and it is recorded.
        status = fields.status
    provider_code = (fields.code or fields.kind) if code_from == "code" else fields.kind
    retry_after = parse_retry_after(headers)
    transient = _is_transient(status, headers, fields)
    message = fields.message or _status_message(status, text)
    if transient and retry_after is not None and retry_after > RETRY_AFTER_CAP_SECONDS:
        transient = False
        message += f" (Retry-After {retry_after:.0f} s is above the cap.)"
    return ProviderError(
        transient=transient,
        message=message,
        diagnostics=diagnostics(provider, code=provider_code, status=status, parameter=fields.param),
        retry_after=retry_after,
    )


def _status_message(status: int, text: str) -> str:
    line = page_line(text) if text else ""
    return f"The provider answered HTTP {status}" + (f": {line}." if line else ".")


def _is_transient(status: int, headers: httpx.Headers, fields: ErrorFields) -> bool:
    should_retry = (headers.get("x-should-retry") or "").strip().lower()
    if should_retry in ("true", "false"):
        return should_retry == "true"
    if status in (200, 429) and any(map(is_quota_code, (fields.code, fields.kind, fields.detail_code))):
        return False  # a spend cap or an unpaid bill: waiting seconds cannot help
    if status == 200:  # an error event inside a successful response
        return fields.kind in TRANSIENT_ERROR_TYPES or fields.code in TRANSIENT_ERROR_TYPES
    return bool(status in TRANSIENT_STATUSES or status >= 500)
