"""The conversation routes of docs/contract.md#json-api and #conversations, registered on the one API
(schedules.api.routes): the same auth, scopes, rate limit, body cap and error shape. Conversations and
runs are their owner's only: anyone else's answers 404, admins included.

A message never waits on the provider: the handler queues the run (reservation and django-q2
task in the same transaction) and answers 201/202 with it `queued`; poll the conversation or
`GET /runs/{id}` for its steps and answer.

A schedule the assistant proposes there (docs/contract.md#confirm-before-chat-creates-a-schedule) is
listed with the conversation and confirmed or declined at `/proposals/{id}/confirm|decline`.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any

from django.db.models import Exists, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja.responses import Status
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accounting.money import format_money
from runs import conversations, services
from runs.limits import field_errors
from runs.models import Conversation as ConversationRow
from runs.models import Run as RunRow
from runs.models import TranscriptEntry
from runs.tasks import enqueue_runs
from schedules import proposals
from schedules.api import representations as out
from schedules.api.auth import READ, WRITE, user_of
from schedules.api.base import json_body
from schedules.api.bodies import json_object
from schedules.api.errors import ApiError
from schedules.api.pagination import Ordering, paginate
from schedules.api.routes import Cursor, Limit, api, current, route
from schedules.models import Proposal as ProposalRow
from schedules.models import ScheduleRevision

RUNS_SHOWN = 50
CONVERSATIONS = Ordering(("last_activity_at", "datetime"), ("id", "int"))
E = out.Error


# -- bodies ---------------------------------------------------------------------------------------


class ConversationCreate(BaseModel):
    """A new conversation: the agent to talk to (its name) and the first message."""

    model_config = ConfigDict(extra="forbid")
    agent: str = Field(description="an active agent's name, e.g. sim-assistant", examples=["sim-assistant"])
    message: str = Field(
        description="the message: not blank, at most CONVERSATION_MESSAGE_MAX_CHARS characters (8,000)",
        examples=["every weekday at 7:30 brief me on AI news"],
    )


class MessageCreate(BaseModel):
    """The next message of a conversation."""

    model_config = ConfigDict(extra="forbid")
    message: str = Field(
        description="the message: not blank, at most CONVERSATION_MESSAGE_MAX_CHARS characters (8,000)",
        examples=["give schedule 5 a USD 20 budget"],
    )


api.body_models.update({"ConversationCreate": ConversationCreate, "MessageCreate": MessageCreate})


def _body(model: type[BaseModel], request: HttpRequest) -> Any:
    try:
        return model.model_validate(json_object(request))
    except ValidationError as exc:
        fields = field_errors(exc)
        raise ApiError(422, "invalid_body", "; ".join(fields.values()), fields=fields) from None


# -- representations ------------------------------------------------------------------------------


class ConversationSummary(out.Out):
    id: int
    title: str
    agent: str | None = Field(description="the agent's name")
    schedule_id: int | None = Field(description="set when this is a scheduled run's conversation")
    created_at: datetime
    last_activity_at: datetime = Field(description="when its newest message was sent")
    run_in_progress: bool = Field(description="a run of it is queued or running")


class HistorySent(out.Out):
    exchanges: int = Field(description="earlier exchanges of the conversation sent with this run")
    older_omitted: bool = Field(description="older exchanges were not sent (the agent's history bound)")


class ConversationRun(out.Run):
    prompt: str = Field(description="the owner's message")
    answer: str = Field(description="the final answer; empty until it completed")
    history: HistorySent | None = Field(
        description="what its requests carry of the conversation, chosen when queued; null if scheduled"
    )


class ToolCall(out.Out):
    id: str
    name: str = Field(description="the tool's wire name, e.g. schedule_create")
    arguments: dict[str, Any] | str = Field(description="as the model sent them")


class Message(out.Out):
    run_id: int
    seq: int = Field(description="position in its run's transcript")
    step: int
    role: Annotated[str, out.OneOf(TranscriptEntry.Role.values)]
    content: str
    tool_calls: list[ToolCall] = Field(description="an assistant message's tool calls")
    tool_call_id: str | None = Field(description="a tool result: the call it answers")
    tool_name: str | None = Field(description="a tool result: the tool's wire name")
    is_error: bool = Field(description="a tool result that is an error (the model saw it as such)")
    created_at: datetime


class ScheduleWritten(out.Out):
    """A schedule revision a tool call of this conversation wrote (schedule.create or
    schedule.update, via chat), as pinned."""

    schedule_id: int
    revision: int
    path: Annotated[str, out.OneOf(ScheduleRevision.Path.values)]
    run_id: int | None
    created_at: datetime
    title: str
    cadence: str = Field(description="in words, e.g. 'Weekdays at 07:30, Europe/Riga'")
    next_occurrence_at: datetime | None = Field(description="the schedule's next slot now")
    limits: out.Limits
    max_consecutive_failures: int


class ProposalMonth(out.Out):
    """The owner's month without and with the proposed schedule (an open proposal's)."""

    expected: out.Money = Field(description="the month's expected spend without it")
    expected_with: out.Money
    worst_with: out.Money
    ceiling_reached_on: date | None = Field(description="when the monthly ceiling is reached without it")
    ceiling_reached_on_with: date | None
    stopped: int = Field(description="runs refused by the ceilings or skipped at caps this month without it")
    stopped_with: int = Field(description="the same with it, its own included")


class ProposalForecast(out.Out):
    """What the schedule would cost in the rest of this calendar month (the owner's zone) if created
    now, the month simulated day by day within the ceilings with the owner's other schedules: each
    run at its `max_cost` (it has no runs yet to take a median of), so expected and worst agree
    until it has."""

    expected: out.Money
    worst: out.Money
    runs: out.Runs = Field(description="its runs from now: due, admitted, refused, skipped")
    month: ProposalMonth | None = Field(description="the owner's month without and with it; null unless open")


class Proposal(out.Out):
    """A schedule the assistant proposed with schedule.create, waiting for the owner's confirmation
    (or confirmed, declined, expired): what would be created and what the policy would pin."""

    id: int
    status: Annotated[str, out.OneOf(ProposalRow.Status.values)] = Field(
        description="an open one past `expires_at` reads `expired`"
    )
    title: str
    prompt: str
    cron: str | None
    timezone: str
    run_at: datetime | None
    next_fires: list[datetime] = Field(description="the next (at most three) fire times, in the owner's zone")
    agent: str = Field(description="the agent's name")
    model: str
    limits: out.Limits = Field(description="what the schedule.create policy pins")
    max_consecutive_failures: int
    monthly_cap: out.Money | None = Field(description="null: the policy pins no monthly cap")
    forecast: ProposalForecast
    expires_at: datetime
    schedule_id: int | None = Field(description="the schedule created when it was confirmed")


class ConversationDetail(ConversationSummary):
    runs: list[ConversationRun] = Field(description=f"its newest {RUNS_SHOWN} runs, oldest first")
    earlier_runs: bool = Field(description="older runs exist than those listed")
    messages: list[Message] = Field(description="the transcripts of those runs, in order")
    schedules: list[ScheduleWritten] = Field(description="schedules created or changed here")
    proposals: list[Proposal] = Field(description="schedules proposed here, oldest first")


class ConversationPage(out.Out):
    items: list[ConversationSummary]
    next: str | None


class ConversationCreated(out.Out):
    conversation: ConversationSummary
    run: ConversationRun


def _annotated(queryset: QuerySet[ConversationRow]) -> QuerySet[ConversationRow]:
    in_flight = RunRow.objects.filter(
        conversation=OuterRef("pk"), status__in=[RunRow.Status.QUEUED, RunRow.Status.RUNNING]
    )
    first_agent = RunRow.objects.filter(conversation=OuterRef("pk")).order_by("pk").values("agent__name")[:1]
    return queryset.annotate(
        in_flight=Exists(in_flight), agent_name=Coalesce(F("agent__name"), Subquery(first_agent))
    )


def summary_of(conversation: ConversationRow) -> ConversationSummary:
    return ConversationSummary(
        id=conversation.pk,
        title=conversation.title,
        agent=getattr(conversation, "agent_name", None),
        schedule_id=conversation.schedule_id if conversation.is_scheduled else None,
        created_at=conversation.created_at,
        last_activity_at=conversation.last_activity_at,
        run_in_progress=bool(getattr(conversation, "in_flight", False)),
    )


def run_of(run: RunRow) -> ConversationRun:
    history = None
    if run.history_sent is not None:
        history = HistorySent(exchanges=run.history_sent, older_omitted=run.history_omitted)
    # The run's fields as built (dict(), not model_dump(): its stored limits are not read again
    # as if a person had typed them).
    return ConversationRun(**dict(out.run_of(run)), prompt=run.prompt, answer=run.answer, history=history)


def _message_of(entry: TranscriptEntry) -> Message:
    return Message(
        run_id=entry.run_id,
        seq=entry.seq,
        step=entry.step,
        role=entry.role,
        content=entry.content,
        tool_calls=[
            ToolCall(id=str(c.get("id", "")), name=str(c.get("name", "")), arguments=c.get("arguments") or {})
            for c in entry.tool_calls
            if isinstance(c, dict)
        ],
        tool_call_id=entry.tool_call_id or None,
        tool_name=entry.tool_name or None,
        is_error=entry.is_error,
        created_at=entry.created_at,
    )


# Names each field it copies, as _message_of does: the same shape, not the same logic.
def _written_of(revision: ScheduleRevision) -> ScheduleWritten:
    return ScheduleWritten(
        schedule_id=revision.schedule_id,
        revision=revision.number,
        path=revision.path,
        run_id=revision.run_id,
        created_at=revision.created_at,
        title=revision.title,
        cadence=revision.cadence,
        next_occurrence_at=revision.schedule.next_occurrence_at,
        limits=out.limits_of(revision.limits),
        max_consecutive_failures=revision.max_consecutive_failures,
    )


def proposal_of(card: proposals.ProposalCard) -> Proposal:
    return Proposal(
        id=card.proposal.pk,
        status=card.status,
        title=card.title,
        prompt=card.prompt,
        cron=card.cron,
        timezone=card.timezone,
        run_at=card.run_at,
        next_fires=card.next_fires,
        agent=card.agent,
        model=card.model,
        limits=out.limits_of(card.limits.to_json()),
        max_consecutive_failures=card.max_consecutive_failures,
        monthly_cap=format_money(card.monthly_cap) if card.monthly_cap is not None else None,
        forecast=ProposalForecast(
            expected=format_money(card.forecast.expected),
            worst=format_money(card.forecast.worst),
            runs=out.runs_of(card.forecast.runs),
            month=_month_of(card),
        ),
        expires_at=card.expires_at,
        schedule_id=card.schedule_id,
    )


def _month_of(card: proposals.ProposalCard) -> ProposalMonth | None:
    if card.month is None or card.month_with is None:
        return None
    return ProposalMonth(
        expected=format_money(card.month.expected),
        expected_with=format_money(card.month_with.expected),
        worst_with=format_money(card.month_with.worst),
        ceiling_reached_on=card.month.ceiling_reached_on,
        ceiling_reached_on_with=card.month_with.ceiling_reached_on,
        stopped=card.month.runs.stopped,
        stopped_with=card.month_with.runs.stopped,
    )


def _proposals_of(conversation: ConversationRow) -> list[Proposal]:
    rows = list(conversation.proposals.select_related("agent").order_by("created_at", "id"))
    return [proposal_of(card) for card in proposals.cards(rows, conversation.owner_id)]


def detail_of(conversation: ConversationRow) -> ConversationDetail:
    """The newest RUNS_SHOWN runs of the conversation with their transcripts (four queries)."""
    newest = list(conversation.runs.order_by("-pk")[: RUNS_SHOWN + 1])
    runs = newest[:RUNS_SHOWN][::-1]
    ids = [run.pk for run in runs]
    entries = TranscriptEntry.objects.filter(run_id__in=ids).order_by("run_id", "seq") if ids else []
    revisions = (
        ScheduleRevision.objects.filter(conversation_id=conversation.pk)
        .select_related("schedule")
        .order_by("created_at", "id")
    )
    return ConversationDetail(
        **summary_of(conversation).model_dump(),
        runs=[run_of(run) for run in runs],
        earlier_runs=len(newest) > RUNS_SHOWN,
        messages=[_message_of(entry) for entry in entries],
        schedules=[_written_of(revision) for revision in revisions],
        proposals=_proposals_of(conversation),
    )


def _mine(request: HttpRequest, conversation_id: int) -> ConversationRow:
    conversations_of = _annotated(ConversationRow.objects.owned_by(user_of(request)).select_related("agent"))
    found: ConversationRow = get_object_or_404(conversations_of, pk=conversation_id)
    return found


REFUSALS: dict[type[Exception], str] = {
    conversations.RunInProgress: "run_in_progress",
    conversations.ScheduledConversation: "scheduled_conversation",
    conversations.AgentRetired: "agent_retired",
    conversations.NotAdmitted: "admission_denied",
}


def _refused(exc: Exception) -> ApiError:
    code = next(code for kind, code in REFUSALS.items() if isinstance(exc, kind))
    return ApiError(409, code, str(getattr(exc, "message", exc)))


def _message(value: Any) -> str:
    try:
        return conversations.parse_message(value)
    except conversations.InvalidMessage as exc:
        raise ApiError(422, "invalid_body", str(exc), fields=exc.fields) from None


# -- routes ---------------------------------------------------------------------------------------

SENDING = (
    "The run is admitted against the owner's daily and monthly ceilings (its cost limit is "
    "reserved until it ends) and runs under the interactive limits of the agent. It is queued "
    "on the workers and this answers at once; poll `GET /conversations/{id}` or `GET /runs/{id}`."
)


@route(
    "GET /conversations",
    READ,
    "200 401 403 422 429",
    ConversationPage,
    "List conversations",
    tag="conversations",
)
def list_conversations(
    request: HttpRequest, cursor: str | None = Cursor, limit: int = Limit
) -> ConversationPage:
    """The owner's conversations, newest activity first, scheduled runs' included."""
    rows = _annotated(ConversationRow.objects.owned_by(user_of(request)).select_related("agent"))
    return paginate(request, rows, CONVERSATIONS, summary_of, ConversationPage, cursor=cursor, limit=limit)


@route(
    "GET /conversations/{int:conversation_id}",
    READ,
    "200 401 403 404 429",
    ConversationDetail,
    "Get a conversation",
    tag="conversations",
)
def get_conversation(request: HttpRequest, conversation_id: int) -> ConversationDetail:
    """Its newest 50 runs (status, usage, failure, what was sent of the history), their messages with
    tool calls and results, the schedules created or changed there, and the schedules the assistant
    proposed there (`proposals`), each with what the policy would pin, its next three fires and its
    forecast for this month."""
    return detail_of(_mine(request, conversation_id))


@route(
    "POST /conversations",
    WRITE,
    "201 401 403 409 413 422 429",
    ConversationCreated,
    "Start a conversation",
    tag="conversations",
    body=json_body("ConversationCreate", "agent (its name) and message"),
)
def start_conversation(request: HttpRequest) -> Status[ConversationCreated]:
    """A new conversation and its first interactive run, `queued`. The run is admitted against the
    owner's daily and monthly ceilings (its cost limit is reserved until it ends) and runs under the
    interactive limits of the agent. It is queued on the workers and this answers at once; poll `GET
    /conversations/{id}` or `GET /runs/{id}`. No room under a ceiling: 409 `admission_denied`, with the
    figures, and nothing is written."""
    body = _body(ConversationCreate, request)
    message = _message(body.message)
    try:
        agent = conversations.usable_agent(body.agent)
    except conversations.InvalidMessage as exc:
        raise ApiError(422, "invalid_body", str(exc), fields=exc.fields) from None
    try:
        run = conversations.start_conversation(user_of(request).pk, agent, message, enqueue=enqueue_runs)
    except tuple(REFUSALS) as exc:
        raise _refused(exc) from None
    conversation = _mine(request, run.conversation_id)
    return Status(201, ConversationCreated(conversation=summary_of(conversation), run=run_of(run)))


@route(
    "POST /conversations/{int:conversation_id}/messages",
    WRITE,
    "202 401 403 404 409 413 422 429",
    ConversationRun,
    "Send a message",
    tag="conversations",
    body=json_body("MessageCreate", "message"),
)
def send_message(request: HttpRequest, conversation_id: int) -> Status[ConversationRun]:
    """The next interactive run of the conversation, `queued`, carrying its bounded history. The run is
    admitted against the owner's daily and monthly ceilings (its cost limit is reserved until it ends)
    and runs under the interactive limits of the agent. It is queued on the workers and this answers at
    once; poll `GET /conversations/{id}` or `GET /runs/{id}`. One run at a time: while one is queued or
    running, 409 `run_in_progress`. Also 409 `admission_denied`, `scheduled_conversation` (a scheduled
    run's conversation takes no messages) or `agent_retired`. A message that only says yes ("yes", "ok",
    "confirm", "do it") while exactly one proposal of the conversation is open confirms it first; if it
    cannot be created, 409 `proposal_invalid` or `schedule_limit`, and nothing is sent."""
    conversation = _mine(request, conversation_id)
    message = _message(_body(MessageCreate, request).message)
    try:
        proposals.confirm_from_message(conversation, user_of(request), message)
        run = conversations.send_message(conversation, message, enqueue=enqueue_runs)
    except ConversationRow.DoesNotExist:
        raise ApiError(404, "not_found", "Not found, or not yours.") from None
    except tuple(REFUSALS) as exc:
        raise _refused(exc) from None
    return Status(202, run_of(run))


@route(
    "POST /runs/{int:run_id}/cancel",
    WRITE,
    "200 401 403 404 409 429",
    ConversationRun,
    "Cancel a run",
    tag="runs",
)
def cancel_run(request: HttpRequest, run_id: int) -> ConversationRun:
    """A queued or running run (and its delegated runs) ends `cancelled`: not a failure, and its
    reservation is released; a running one stops before its next step. Ended already: 409 `not_running`."""
    run = get_object_or_404(RunRow.objects.owned_by(user_of(request)), pk=run_id)
    if not services.cancel_run(run):
        run.refresh_from_db()
        raise ApiError(
            409, "not_running", f"This run has already ended ({run.status}); nothing was cancelled."
        )
    return run_of(run)


# -- proposals ------------------------------------------------------------------------------------


@route(
    "POST /proposals/{int:proposal_id}/confirm",
    WRITE,
    "200 201 401 403 404 409 410 429",
    out.Schedule,
    "Confirm a proposed schedule",
    tag="conversations",
)
def confirm_proposal(request: HttpRequest, proposal_id: int) -> Status[out.Schedule]:
    """Creates the schedule the assistant proposed, through the `schedule.create` policy (via chat,
    naming the conversation and run that proposed it): 201 with the schedule, as `POST /schedules`
    answers. Confirmed already (also when confirmations race: exactly one 201): 200 with the same
    schedule. Declined: 409 `proposal_declined`; no longer valid as proposed (its time passed, its agent
    was retired): 409 `proposal_invalid`; no room for one more active schedule: 409 `schedule_limit`;
    unconfirmed for 24 hours: 410 `proposal_expired`."""
    user = user_of(request)
    schedule, created = proposals.confirm(proposal_id, user)
    return Status(201 if created else 200, current(user, schedule))


@route(
    "POST /proposals/{int:proposal_id}/decline",
    WRITE,
    "200 401 403 404 409 410 429",
    Proposal,
    "Decline a proposed schedule",
    tag="conversations",
)
def decline_proposal(request: HttpRequest, proposal_id: int) -> Proposal:
    """Nothing is created; 200 with the proposal, `declined` (again: the same). Confirmed already: 409
    `proposal_confirmed`; unconfirmed for 24 hours: 410 `proposal_expired`."""
    user = user_of(request)
    declined = proposals.decline(proposal_id, user)
    row = ProposalRow.objects.select_related("agent").get(pk=declined.pk)
    return proposal_of(proposals.cards([row], user.pk)[0])
