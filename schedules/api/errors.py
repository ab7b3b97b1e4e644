"""Every API error is one JSON shape: {"error": {"code", "message", "fields"}}
(docs/contract.md#json-api).

One handler, registered for Exception, replaces all of django-ninja's defaults, so an error
raised anywhere in a request, by ninja (validation, authentication), Django (404, permission,
body size) or a service, answers in that shape. Bad input never becomes a 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    ObjectDoesNotExist,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.db import IntegrityError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from runs.limits import InvalidLimits, describe_error
from runs.services import ConversationBusy
from schedules import proposals, services
from schedules.schemas import InvalidSchedule

logger = logging.getLogger(__name__)

CODE_OF_STATUS: dict[int, str] = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    414: "url_too_long",
    422: "invalid_request",
    429: "rate_limited",
    500: "internal_error",
}


class ApiError(Exception):
    """An answer other than success: status, a snake_case code, plain words, and per-field reasons."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        fields: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = dict(fields or {})
        self.headers = dict(headers or {})


def error_body(code: str, message: str, fields: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": dict(fields or {})}}


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    fields: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpResponse:
    """The error shape as a plain Django response."""
    response = HttpResponse(
        json.dumps(error_body(code, message, fields)),
        status=status,
        content_type="application/json; charset=utf-8",
    )
    for name, value in (headers or {}).items():
        response[name] = value
    if status == 401:
        response.setdefault("WWW-Authenticate", 'Bearer realm="api"')
    return response


# Domain exceptions raised by the services, and how each answers.
STATE_ERRORS: dict[type[Exception], tuple[int, str, str]] = {
    services.NotActive: (409, "not_active", "This schedule is not active, so it cannot be paused."),
    services.NotPaused: (409, "not_paused", "This schedule is not paused, so it cannot be resumed."),
    services.ScheduleCompleted: (
        409,
        "schedule_completed",
        "This schedule has completed; a completed schedule cannot be edited.",
    ),
    ConversationBusy: (
        409,
        "conversation_busy",
        "This conversation has a run in flight; cancel the run or wait for it to end, then delete.",
    ),
    services.RequestAlreadyOpen: (
        409,
        "request_open",
        "This schedule already has an open revision request; it waits for an admin's decision.",
    ),
    services.RequestDecided: (409, "request_decided", "This revision request has already been decided."),
    services.RevisionChanged: (
        409,
        "revision_changed",
        "The schedule has a newer revision than base_revision; review it and decide again.",
    ),
    # docs/contract.md#confirm-before-chat-creates-a-schedule
    proposals.ProposalDeclined: (409, "proposal_declined", proposals.ProposalDeclined.message),
    proposals.ProposalConfirmed: (409, "proposal_confirmed", proposals.ProposalConfirmed.message),
    proposals.ProposalExpired: (410, "proposal_expired", proposals.ProposalExpired.message),
}


def parameter_fields(errors: list[dict[str, Any]]) -> dict[str, str]:
    """ninja's query/path errors as {parameter: reason}; the location ("query") is dropped."""
    fields: dict[str, str] = {}
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if not isinstance(part, int)]
        field = ".".join(loc[1:]) or (loc[0] if loc else "request")
        fields.setdefault(field, describe_error(field, error))
    return fields


def as_api_error(exc: object) -> ApiError | None:
    """The answer for an exception raised while serving a request; None for a real fault."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NinjaValidationError):  # query or path parameters
        fields = parameter_fields(exc.errors)
        return ApiError(422, "invalid_parameter", "; ".join(fields.values()), fields=fields)
    if isinstance(exc, InvalidSchedule):  # includes LimitsNotUpdatable, with its own code
        code = "invalid_body" if exc.code == InvalidSchedule.code else exc.code
        return ApiError(422, code, str(exc), fields=exc.fields)
    if isinstance(exc, InvalidLimits):
        return ApiError(422, "invalid_body", str(exc), fields=exc.fields)
    if isinstance(exc, services.ScheduleLimit):
        return ApiError(409, "schedule_limit", exc.message)
    if isinstance(exc, proposals.ProposalInvalid):
        return ApiError(409, "proposal_invalid", exc.message, fields=exc.fields)
    for exc_class, (status, code, message) in STATE_ERRORS.items():
        if isinstance(exc, exc_class):
            return ApiError(status, code, message)
    if isinstance(exc, AuthenticationError):
        return ApiError(401, "not_authenticated", "Send an API token: Authorization: Bearer <token>.")
    if isinstance(exc, HttpError):
        code = CODE_OF_STATUS.get(exc.status_code, "error")
        return ApiError(exc.status_code, code, str(exc) or HTTPStatus(exc.status_code).phrase)
    if isinstance(exc, (Http404, ObjectDoesNotExist)):  # gone, perhaps deleted by a concurrent request
        return ApiError(404, "not_found", "Not found, or not yours.")
    if isinstance(exc, PermissionDenied):
        return ApiError(403, "permission_denied", str(exc) or "You do not have permission to do this.")
    if isinstance(exc, RequestDataTooBig):
        return body_too_large()
    if isinstance(exc, SuspiciousOperation):
        return ApiError(400, "bad_request", "The request could not be understood.")
    if isinstance(exc, IntegrityError) or (isinstance(exc, OperationalError) and _is_deadlock(exc)):
        # Writers on one schedule queue on its row lock; if two still collide, the loser is told.
        return ApiError(409, "conflict", "The schedule changed while this request ran; reload and try again.")
    return None


def _is_deadlock(exc: OperationalError) -> bool:
    return getattr(getattr(exc, "__cause__", None), "sqlstate", "") in ("40P01", "40001")


def handle_exception(request: HttpRequest, exc: Exception | type[Exception]) -> HttpResponse:
    """ninja's handler for every exception (registered for Exception, so it replaces the
    defaults): the error shape, and a logged 500 for anything that is not the client's fault."""
    error = as_api_error(exc)
    if error is None:
        logger.error(
            "API request %s %s failed",
            request.method,
            request.path,
            exc_info=exc if isinstance(exc, BaseException) else True,
        )
        return error_response(500, "internal_error", "Something went wrong on our side; it has been logged.")
    return error_response(error.status, error.code, error.message, fields=error.fields, headers=error.headers)


def install_error_handlers(api: NinjaAPI) -> None:
    api.add_exception_handler(Exception, handle_exception)


def body_too_large() -> ApiError:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return ApiError(413, "body_too_large", f"The request body is larger than the {limit}-byte limit.")
