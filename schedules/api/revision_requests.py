"""The revision-request routes of docs/contract.md#json-api: an owner asks for new limits on their
schedule; an admin (a `pin_revision` token whose user has the pin permission) lists the open requests,
oldest first, and decides each: pin (the explicit revision, which records the request) or decline.

Registered on the one `api` of schedules.api.routes; handlers parse, check scope and ownership,
call one service and render, like every other route.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja.params.functions import Query
from ninja.responses import Status
from pydantic import Field

from schedules import services
from schedules.api.auth import PIN, WRITE, user_of
from schedules.api.base import json_body
from schedules.api.bodies import json_object
from schedules.api.errors import ApiError
from schedules.api.pagination import Ordering, paginate
from schedules.api.representations import Limits, OneOf, Out, limits_of
from schedules.api.routes import VIA, Cursor, Limit, api, is_admin, route, schedule_for
from schedules.models import RevisionRequest as RevisionRequestRow
from schedules.schemas import (
    ExplicitRevision,
    RequestDecision,
    RevisionRequestBody,
    parse_decision,
    parse_revision_request,
)

api.body_models.update({"RevisionRequestBody": RevisionRequestBody, "RequestDecision": RequestDecision})


class RevisionRequest(Out):
    id: int
    schedule_id: int
    state: Annotated[str, OneOf(RevisionRequestRow.State.values)]
    created_at: datetime
    requested_by: str | None = Field(description="username; null once that user is deleted")
    base_revision: int = Field(description="the number of the revision in force when it was asked")
    limits: Limits = Field(description="the complete limits asked for")
    max_consecutive_failures: int
    reason: str
    decided_at: datetime | None
    decided_by: str | None
    decline_reason: str | None = Field(description="why it was declined; null unless declined")
    revision: int | None = Field(description="the number of the explicit revision that pinned it")


class RevisionRequestPage(Out):
    items: list[RevisionRequest]
    next: str | None


class Oldest(Ordering):
    """Ascending order (a queue: oldest first) over `fields`, the last of which is unique."""

    def order_by(self) -> list[str]:
        return [name for name, _ in self.fields]

    def after(self, values: Any) -> Q:
        branches = Q(pk__in=[])
        equal: dict[str, Any] = {}
        for (name, _), value in zip(self.fields, values, strict=True):
            branches |= Q(**equal, **{f"{name}__gt": value})
            equal[name] = value
        return branches


QUEUE = Oldest(("created_at", "datetime"), ("id", "int"))
StateFilter = Query(None, description="only this state (`open`: the queue)")


def request_of(row: RevisionRequestRow) -> RevisionRequest:
    return RevisionRequest(
        id=row.pk,
        schedule_id=row.schedule_id,
        state=row.state,
        created_at=row.created_at,
        requested_by=row.requested_by.get_username() if row.requested_by else None,
        base_revision=row.base_revision,
        limits=limits_of(row.limits),
        max_consecutive_failures=row.max_consecutive_failures,
        reason=row.reason,
        decided_at=row.decided_at,
        decided_by=row.decided_by.get_username() if row.decided_by else None,
        decline_reason=row.decline_reason or None,
        revision=row.revision.number if row.revision else None,
    )


def _rows() -> QuerySet[RevisionRequestRow]:
    return RevisionRequestRow.objects.select_related("requested_by", "decided_by", "revision")


def _decidable_by(user: User) -> QuerySet[RevisionRequestRow]:
    """An admin decides every owner's requests; staff holding the pin permission alone, their own."""
    return _rows() if is_admin(user) else _rows().filter(schedule__owner_id=user.pk)


def _deciding(request: HttpRequest) -> User:
    """The token's user, who must hold the pin permission (checked before the body: a 403)."""
    user = user_of(request)
    if not user.has_perm(services.PIN_PERMISSION):
        message = "Deciding revision requests needs the pin_revision permission."
        raise ApiError(403, "permission_denied", message)
    return user


@route(
    "POST /schedules/{int:schedule_id}/revision-requests",
    WRITE,
    "201 401 403 404 409 413 422 429",
    RevisionRequest,
    "Ask for new limits",
    tag="revision requests",
    body=json_body("RevisionRequestBody", "the complete limits asked for, the failure limit and why"),
)
def create_revision_request(request: HttpRequest, schedule_id: int) -> Status[RevisionRequest]:
    """The owner cannot change limits (only an explicit revision can); this asks an admin to pin these:
    complete `limits`, `max_consecutive_failures` and a `reason`, as for an explicit revision. One open
    request per schedule: another answers 409 `request_open`. The owner is told on their notification
    channels when it is decided. Only the schedule's owner."""
    user = user_of(request)
    schedule = schedule_for(user, schedule_id, owner_only=True)
    data = parse_revision_request(json_object(request))
    asked = services.request_revision(schedule, data, by=user, via=VIA)
    return Status(201, request_of(_rows().get(pk=asked.pk)))


@route(
    "GET /revision-requests",
    PIN,
    "200 401 403 422 429",
    RevisionRequestPage,
    "List revision requests",
    tag="revision requests",
)
def list_revision_requests(
    request: HttpRequest,
    state: RevisionRequestRow.State | None = StateFilter,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> RevisionRequestPage:
    """Requests to decide, oldest first; `?state=open` for the queue. Also needs the user's pin
    permission (403 `permission_denied` otherwise)."""
    user = _deciding(request)
    rows = _decidable_by(user)
    if state is not None:
        rows = rows.filter(state=state)
    return paginate(request, rows, QUEUE, request_of, RevisionRequestPage, cursor=cursor, limit=limit)


@route(
    "POST /revision-requests/{int:request_id}/decision",
    PIN,
    "200 401 403 404 409 413 422 429",
    RevisionRequest,
    "Decide a revision request",
    tag="revision requests",
    body=json_body("RequestDecision", "pin with the final limits and a reason, or decline with a reason"),
)
def decide_revision_request(request: HttpRequest, request_id: int) -> RevisionRequest:
    """`{"decision": "pin", "limits", "max_consecutive_failures", "reason"}` writes the explicit
    revision (with the final values, which may differ from those asked) and records the request on it;
    `{"decision": "decline", "reason"}` declines it. `base_revision`, when given, must be the revision
    in force (409 `revision_changed` otherwise). Decided already: 409 `request_decided`. The owner is
    told either way. Also needs the pin permission."""
    user = _deciding(request)
    rows = _decidable_by(user)
    asked = get_object_or_404(rows, pk=request_id)
    decision = parse_decision(json_object(request))
    if isinstance(decision.decided, ExplicitRevision):
        services.pin_from_request(
            asked, decision.decided, by=user, via=VIA, expected_number=decision.base_revision
        )
    else:
        services.decline_request(asked, decision.decided, by=user, via=VIA)
    return request_of(_rows().get(pk=asked.pk))
