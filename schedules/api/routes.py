"""The routes of docs/contract.md#json-api. Each handler parses input, checks scope and ownership, calls
one service and renders: no transition is implemented here.

Each handler's `@route` is its entry in the served OpenAPI schema, written in one line where it fits:
method and path, the token it needs, every status code it answers and the body of its success, its
summary and tag; its docstring is the operation's description (`route` says how it is built). A
route too long for one line takes a few, in the shape of the others: a table, not copied logic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router
from ninja.params.functions import Query
from ninja.responses import Status

from accounting import alerts, ledger
from accounting.models import AccountingEvent as AccountingEventRow
from accounting.selectors import calls_of, month_usage, owner_timezone
from runs import inflight
from runs import services as run_services
from runs.models import Conversation
from runs.models import Run as RunRow
from schedules import forecast, services
from schedules.api import representations as out
from schedules.api.auth import PIN, READ, WRITE, BearerToken, user_of
from schedules.api.base import ScheduleApi, json_body
from schedules.api.bodies import json_object
from schedules.api.errors import ApiError
from schedules.api.pagination import DEFAULT_LIMIT, MAX_CURSOR_CHARS, MAX_LIMIT, Ordering, paginate
from schedules.models import Schedule as ScheduleRow
from schedules.schemas import (
    ExplicitRevision,
    ScheduleCreate,
    ScheduleUpdate,
    parse_create,
    parse_explicit,
    parse_update,
)

VIA = "api"
LAST_OCCURRENCES = 10

api = ScheduleApi(
    title="Scheduled agent runs",
    version="1",
    urls_namespace="api",
    # Unset optional keys (the diagnostics a failed run did not record) are left out of the JSON.
    default_router=Router(exclude_unset=True),
    body_models={
        "ScheduleCreate": ScheduleCreate,
        "ScheduleUpdate": ScheduleUpdate,
        "ExplicitRevision": ExplicitRevision,
        "AlertThresholds": out.AlertThresholds,
    },
    description="""Schedules, their revisions and occurrences, runs, accounting events and the
budget, for API clients.

**Auth**: `Authorization: Bearer <token>`. A token acts as its user, limited by its scopes (`read`,
`write`, `pin_revision`); each operation names the scope it needs. Pinning a revision also needs
the user's pin permission. Another owner's object answers 404; admins (staff with the pin
permission) may read, pause, resume and pin any schedule, as in the Django admin.

**Errors** always have the shape `{"error": {"code", "message", "fields"}}`: 401 no, invalid or
revoked token; 403 missing scope or permission; 404 not found or not yours; 409 wrong state;
413 body too large; 414 an address longer than 4,094 bytes; 422 invalid body or parameter
(`fields` names each field, dotted when nested, e.g. `limits.synthesis_reserve_cost`); 429 too
many requests, with `Retry-After`.

**Lists** are newest first and paged: `{"items": [...], "next": <absolute URL or null>}`; follow
`next` for the following page. `limit` sets the page size (1-100, default 50).

Money is a decimal string (`"5.00"`); times are ISO 8601 with an offset.""",
)

E = out.Error


Handler = TypeVar("Handler", bound=Callable[..., Any])


def route(
    operation: str,
    auth: BearerToken,
    answers: str,
    returns: Any,
    summary: str,
    *,
    tag: str,
    body: dict[str, Any] | None = None,
) -> Callable[[Handler], Handler]:
    """Registers the handler below on `api` as `operation` ("METHOD /path"), with its entry in the
    served schema. `answers` lists every status code it answers: a code below 400 with `returns`
    (None: no body), any other with E, the error shape; 414 (config.middleware) goes on every one.
    The description is the handler's docstring (one paragraph: line breaks fold to spaces) and the
    scope its token needs; `body` documents its JSON body (base.json_body)."""
    method, path = operation.split(" ", 1)
    scope = str(auth.scope)
    response = {int(code): returns if int(code) < 400 else E for code in answers.split()}
    response[414] = E  # any address over the length production serves (config.middleware)

    def register(handler: Handler) -> Handler:
        text = " ".join((handler.__doc__ or "").split())
        return api.api_operation(
            [method],
            path,
            auth=auth,
            response=response,
            summary=summary,
            tags=[tag],
            description=f"{text}\n\nScope: `{scope}`.",
            openapi_extra={"x-required-scope": scope, **(body or {})},
        )(handler)

    return register


Cursor = Query(None, max_length=MAX_CURSOR_CHARS, description="the cursor of a `next` link")
StatusFilter = Query(None, description="only this status")
Limit = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="page size")

SCHEDULES = Ordering(("created_at", "datetime"), ("id", "int"))
REVISIONS = Ordering(("number", "int"))
OCCURRENCES = Ordering(("scheduled_for", "datetime"), ("id", "int"))
EVENTS = Ordering(("created_at", "datetime"), ("id", "int"))


is_admin = services.is_admin


def visible_schedules(user: User) -> QuerySet[ScheduleRow]:
    """The user's schedules (every schedule for an admin), with all a representation reads."""
    schedules = ScheduleRow.objects.all() if is_admin(user) else ScheduleRow.objects.owned_by(user)
    return schedules.select_related(
        "current_revision",
        "current_revision__agent",
        "current_revision__created_by",
        "pause",
        "pause__actor",
        "last_event",
    )


def schedule_for(user: User, schedule_id: int, *, owner_only: bool = False) -> ScheduleRow:
    queryset = ScheduleRow.objects.owned_by(user) if owner_only else visible_schedules(user)
    schedule: ScheduleRow = get_object_or_404(queryset, pk=schedule_id)
    return schedule


def current(user: User, schedule: ScheduleRow) -> out.Schedule:
    """The schedule as it is now, after a service changed it."""
    return out.schedule_of(get_object_or_404(visible_schedules(user), pk=schedule.pk))


# -- schedules ------------------------------------------------------------------------------------


@route("GET /schedules", READ, "200 401 403 422 429", out.SchedulePage, "List schedules", tag="schedules")
def list_schedules(
    request: HttpRequest,
    status: ScheduleRow.Status | None = StatusFilter,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> out.SchedulePage:
    """Newest first; `?status=paused` lists the paused ones."""
    schedules = visible_schedules(user_of(request))
    if status is not None:
        schedules = schedules.filter(status=status)
    return paginate(
        request, schedules, SCHEDULES, out.schedule_of, out.SchedulePage, cursor=cursor, limit=limit
    )


@route(
    "POST /schedules",
    WRITE,
    "201 401 403 409 413 422 429",
    out.Schedule,
    "Create a schedule",
    tag="schedules",
    body=json_body("ScheduleCreate", "title, prompt, agent (its name), run_at or cron + timezone"),
)
def create_schedule(request: HttpRequest) -> Status[out.Schedule]:
    """Through the `schedule.create` policy: two consecutive failures pause it; its cost limit is the
    agent's finite cost limit or USD 5, capped by the schedule cost ceiling; synthesis reserves of 2
    steps, 2 model calls and USD 1, each kept only below its total. Give `run_at` (one-time) or `cron`
    and `timezone` (recurring). An owner with as many active schedules as allowed
    (`MAX_ACTIVE_SCHEDULES`, or their own cap): 409 `schedule_limit`."""
    user = user_of(request)
    data = parse_create(json_object(request))
    schedule = services.create_schedule(user, data, via=VIA)
    return Status(201, current(user, schedule))


@route(
    "GET /schedules/{int:schedule_id}",
    READ,
    "200 401 403 404 429",
    out.ScheduleDetail,
    "Get a schedule",
    tag="schedules",
)
def get_schedule(request: HttpRequest, schedule_id: int) -> out.ScheduleDetail:
    """With its current revision, its last 10 occurrences, and `month`: what it spent this calendar
    month (the owner's zone) and is expected to spend by its end (each run at the median cost of its
    last 20 completed runs) and at worst (each at `max_cost`), the month simulated day by day within its
    `monthly_cap` and the owner's daily and monthly ceilings, with its runs due, admitted, refused and
    skipped."""
    schedule = schedule_for(user_of(request), schedule_id)
    occurrences = list(
        schedule.occurrences.select_related("revision").order_by(*OCCURRENCES.order_by())[:LAST_OCCURRENCES]
    )
    return out.schedule_detail_of(schedule, occurrences, forecast.schedule_forecast(schedule))


@route(
    "PATCH /schedules/{int:schedule_id}",
    WRITE,
    "200 401 403 404 409 413 422 429",
    out.Schedule,
    "Edit a schedule",
    tag="schedules",
    body=json_body("ScheduleUpdate", "only the fields to change"),
)
def update_schedule(request: HttpRequest, schedule_id: int) -> out.Schedule:
    """`schedule.update`: title, prompt, cron, timezone (or run_at for a one-time schedule), as a new
    revision that copies the limits and failure limit. Any limit field or `max_consecutive_failures`
    answers 422 `limits_not_updatable`: those change only through an explicit revision. A completed
    schedule answers 409 `schedule_completed`."""
    user = user_of(request)
    schedule = schedule_for(user, schedule_id, owner_only=True)
    data = parse_update(json_object(request))
    services.update_schedule(schedule, data, by=user, via=VIA)
    return current(user, schedule)


@route(
    "POST /schedules/{int:schedule_id}/pause",
    WRITE,
    "200 401 403 404 409 429",
    out.Schedule,
    "Pause a schedule",
    tag="schedules",
)
def pause_schedule(request: HttpRequest, schedule_id: int) -> out.Schedule:
    """Active to paused, with reason `owner` (or `admin` when an admin pauses someone else's schedule).
    Not active: 409 `not_active`."""
    return _moved(request, schedule_id, services.pause_schedule)


@route(
    "POST /schedules/{int:schedule_id}/resume",
    WRITE,
    "200 401 403 404 409 429",
    out.Schedule,
    "Resume a schedule",
    tag="schedules",
)
def resume_schedule(request: HttpRequest, schedule_id: int) -> out.Schedule:
    """Paused to active. The consecutive-failure count is kept: a schedule paused at its failure limit
    pauses again at its next failure, until one of its runs completes. The next slot is computed from
    now (no backfill). Not paused: 409 `not_paused`; no room for one more active schedule: 409
    `schedule_limit`."""
    return _moved(request, schedule_id, services.resume_schedule)


def _moved(request: HttpRequest, schedule_id: int, move: Callable[..., Any]) -> out.Schedule:
    """The schedule after `move` (pause or resume) by the caller, who must be able to see it."""
    user = user_of(request)
    schedule = schedule_for(user, schedule_id)
    move(schedule, by=user)
    return current(user, schedule)


# -- revisions and occurrences --------------------------------------------------------------------


@route(
    "GET /schedules/{int:schedule_id}/revisions",
    READ,
    "200 401 403 404 422 429",
    out.RevisionPage,
    "List a schedule's revisions",
    tag="schedules",
)
def list_revisions(
    request: HttpRequest, schedule_id: int, cursor: str | None = Cursor, limit: int = Limit
) -> out.RevisionPage:
    """All revisions, newest first, with who made each, when, how and why."""
    revisions = schedule_for(user_of(request), schedule_id).revisions.select_related("created_by")
    return paginate(
        request, revisions, REVISIONS, out.revision_of, out.RevisionPage, cursor=cursor, limit=limit
    )


@route(
    "POST /schedules/{int:schedule_id}/revisions",
    PIN,
    "201 401 403 404 413 422 429",
    out.Revision,
    "Pin an explicit revision",
    tag="schedules",
    body=json_body("ExplicitRevision", "complete limits, the failure limit and a reason"),
)
def pin_revision(request: HttpRequest, schedule_id: int) -> Status[out.Revision]:
    """The only way limits or the failure limit change: complete `limits`, `max_consecutive_failures`
    and a `reason`. It governs occurrences materialized after it; runs already materialized keep the
    limits they copied, and earlier revisions are never rewritten. Also needs the user's pin permission
    (403 `permission_denied` otherwise)."""
    user = user_of(request)
    if not user.has_perm(services.PIN_PERMISSION):  # before the body, so no permission is a 403
        raise ApiError(403, "permission_denied", "Pinning a revision needs the pin_revision permission.")
    schedule = schedule_for(user, schedule_id)
    data = parse_explicit(json_object(request))
    revision = services.pin_revision(schedule, data, by=user, via=VIA)
    revision = schedule.revisions.select_related("created_by").get(pk=revision.pk)
    return Status(201, out.revision_of(revision))


# Declared as list_revisions is (its route, then one page of the schedule's own rows): a table of
# routes, each its own URL, permission and page type.
@route(
    "GET /schedules/{int:schedule_id}/occurrences",
    READ,
    "200 401 403 404 422 429",
    out.OccurrencePage,
    "List a schedule's occurrences",
    tag="schedules",
)
def list_occurrences(
    request: HttpRequest, schedule_id: int, cursor: str | None = Cursor, limit: int = Limit
) -> out.OccurrencePage:
    """Newest first: when each slot was due, its outcome, the revision in force, and its run (null once
    the run's conversation is deleted)."""
    occurrences = schedule_for(user_of(request), schedule_id).occurrences.select_related("revision")
    return paginate(
        request, occurrences, OCCURRENCES, out.occurrence_of, out.OccurrencePage, cursor=cursor, limit=limit
    )


# -- runs, accounting, budget, conversations -------------------------------------------------------


@route(
    "GET /runs/in-flight",
    READ,
    "200 401 403 429",
    out.InFlight,
    "Count runs in flight and queued",
    tag="runs",
)
def runs_in_flight(request: HttpRequest) -> out.InFlight:
    """How many of your runs are running (waiting on their providers, each on a worker's thread) and how
    many are queued for a worker. An admin sees every owner's, with the running ones per worker process
    (docs/decisions/0005-runs-in-flight.md), and which workers are lost: no heartbeat within the run
    lease (a host killed, paused or cut off)."""
    user = user_of(request)
    admin = is_admin(user)
    counts = inflight.in_flight(None if admin else user.pk)
    return out.InFlight(
        scope="all" if admin else "owner",
        running=counts.running,
        queued=counts.queued,
        workers=[
            out.WorkerRuns(
                worker=w.label,
                host=w.host,
                running=w.running,
                last_heartbeat_at=w.last_heartbeat,
                lost=w.lost,
            )
            for w in counts.workers
        ],
    )


@route("GET /runs/{int:run_id}", READ, "200 401 403 404 429", out.RunDetail, "Get a run", tag="runs")
def get_run(request: HttpRequest, run_id: int) -> out.RunDetail:
    """Limits, usage, which dimension activated synthesis, and the failure with its message; each
    provider call with its tokens by kind, what it was charged (the provider's reported charge where it
    reports one, else computed from the prices named) and the tokens in total. Only the run's owner sees
    it."""
    run = get_object_or_404(RunRow.objects.owned_by(user_of(request)), pk=run_id)
    return out.run_detail_of(run, calls_of([run.pk]).get(run.pk, []))


@route(
    "GET /accounting-events",
    READ,
    "200 401 403 422 429",
    out.AccountingEventPage,
    "List accounting events",
    tag="accounting",
)
def list_accounting_events(
    request: HttpRequest,
    schedule: int | None = Query(None, ge=1, le=2**63 - 1, description="a schedule id"),
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> out.AccountingEventPage:
    """`schedule.run_accounted` events (and `schedule.late_usage_accounted`, which versions before
    2026-12-04 wrote for a provider call that returned after its run was accounted), newest first;
    `?schedule=<id>` for one schedule's. They are content-free and outlive the runs, conversations and
    schedules they describe; a run's events sum to its usage."""
    user = user_of(request)
    events = AccountingEventRow.objects.all()
    if not is_admin(user):
        events = events.filter(owner_id=user.pk)
    if schedule is not None:
        events = events.filter(schedule_id=schedule)
    return paginate(
        request, events, EVENTS, out.accounting_event_of, out.AccountingEventPage, cursor=cursor, limit=limit
    )


@route("GET /budget", READ, "200 401 403 429", out.Budget, "Get the budget", tag="accounting")
def get_budget(request: HttpRequest) -> out.Budget:
    """The daily and monthly ceilings, spend today and this month (in the owner's time zone), the
    reservations held by runs in flight, this month's spend by model and by kind of token (uncached
    input, cache reads, cache writes, output; reasoning is part of output), the alert thresholds
    crossed, and the month's `forecast`, simulated day by day within the ceilings: what it comes to,
    when the monthly ceiling is reached, on how many days the daily ceiling refuses runs, and how many
    runs are refused or skipped, from which schedules."""
    user = user_of(request)
    budget = ledger.budget_row(user.pk)
    summary = ledger.summarize(user.pk, budget=budget)
    return out.budget_of(
        summary,
        month_usage(user.pk, owner_timezone(budget)),
        thresholds=alerts.thresholds_of(budget),
        crossed=alerts.crossed(user.pk, summary),
        coming=forecast.month_forecast(user.pk, budget=budget, summary=summary, named=True),
    )


@route(
    "PUT /budget/alerts",
    WRITE,
    "200 401 403 413 422 429",
    out.AlertThresholds,
    "Set the alert thresholds",
    tag="accounting",
    body=json_body("AlertThresholds", "the thresholds, in percent"),
)
def set_alert_thresholds(request: HttpRequest) -> out.AlertThresholds:
    """`{"thresholds": [50, 80, 100]}`: percentages of the daily and the monthly ceiling; JSON integers
    1-100, distinct, at most five (an empty list turns alerts off). Crossing one tells you once per
    period, on your notification channels. Invalid: 422 naming `thresholds`."""
    user = user_of(request)
    body = json_object(request)
    unknown = sorted(key for key in body if key != "thresholds")
    if unknown or "thresholds" not in body:
        fields = {k: f"{k} is not a recognised field" for k in unknown[:5]}
        if "thresholds" not in body:
            fields["thresholds"] = "thresholds is required"
        raise ApiError(422, "invalid_body", "; ".join(fields.values()), fields=fields)
    try:
        thresholds = alerts.parse_thresholds(body["thresholds"])
    except alerts.InvalidThresholds as exc:
        raise ApiError(422, "invalid_body", f"thresholds: {exc}", fields={"thresholds": str(exc)}) from None
    return out.AlertThresholds(thresholds=alerts.set_thresholds(user.pk, thresholds))


@route(
    "DELETE /conversations/{int:conversation_id}",
    WRITE,
    "204 401 403 404 409 429",
    None,
    "Delete a conversation",
    tag="conversations",
)
def delete_conversation(request: HttpRequest, conversation_id: int) -> Status[None]:
    """Deletes the conversation with its runs, transcripts and failure records; 204 with no body. Spend
    and accounting events stay. A run in flight: 409 `conversation_busy`."""
    conversation = get_object_or_404(Conversation.objects.owned_by(user_of(request)), pk=conversation_id)
    run_services.delete_conversation(conversation)
    return Status(204, None)
