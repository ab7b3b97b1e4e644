"""Reading a JSON request body: size cap (413), malformed JSON and non-objects (422).

The object is then validated by the shared parsers in schedules.schemas, so the API words field
errors exactly as the dashboard and the chat tools do.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from schedules.api.errors import ApiError, body_too_large


def json_object(request: HttpRequest) -> dict[str, Any]:
    try:
        raw = request.body  # Django refuses a Content-Length above DATA_UPLOAD_MAX_MEMORY_SIZE
    except RequestDataTooBig:
        raise body_too_large() from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
        raise ApiError(
            422,
            "malformed_json",
            "The request body is not valid JSON.",
            fields={"body": "body must be a JSON object"},
        ) from None
    if not isinstance(data, dict):
        raise ApiError(
            422,
            "invalid_body",
            "The request body must be a JSON object.",
            fields={"body": "body must be a JSON object"},
        )
    field = unstorable_text(data)
    if field is not None:
        message = f"{field} must be text without NUL characters or unpaired surrogates"
        raise ApiError(422, "invalid_body", message, fields={field: message})
    return data


def unstorable_text(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string PostgreSQL cannot store (a NUL character, or a lone
    surrogate that has no UTF-8 form), so it is refused as input instead of failing the write."""
    if isinstance(value, str):
        if "\x00" in value:
            return path or "body"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "body"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = unstorable_text(key, path or "body") or unstorable_text(
                item, f"{path}.{key}" if path else str(key)
            )
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = unstorable_text(item, path)
            if found is not None:
                return found
    return None
