"""A conversation as the owner reads it: each message, the steps its run took (model calls, tool
calls with a short result, the synthesis-only turn), the answer, the schedules proposed, created or
changed there as cards, refusals with what to do instead, and what was sent of the history.

A fixed number of queries, however long the conversation: the newest THREAD_RUNS exchanges.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from accounting.formatting import money_text
from runs.failures import Failure
from runs.limits import RunLimits
from runs.models import Agent, Conversation, Run, TranscriptEntry
from schedules import proposals
from schedules.models import Proposal, Schedule, ScheduleRevision, revision_snapshot
from schedules.schemas import NOT_UPDATABLE_MESSAGE
from schedules.selectors.runs import Bar, run_bars, synthesis_reason
from schedules.selectors.schedules import Change, diff

THREAD_RUNS = 20
SHORT_RESULT_CHARS = 180
# The words schedule.update refuses a limit change with (schedules.schemas), without the field.
LIMITS_REFUSAL = NOT_UPDATABLE_MESSAGE.split("{field} ", 1)[1].split(":", 1)[0]
SCHEDULE_TOOLS = ("schedule_create", "schedule_update")


@dataclass(frozen=True)
class ToolUse:
    name: str  # as people say it: "schedule.create"
    arguments: str
    result: str  # short: the first line, cut
    is_error: bool
    done: bool  # its result is recorded (results are written with the next step)


@dataclass(frozen=True)
class Step:
    number: int
    text: str
    tools: list[ToolUse]
    synthesis: bool


@dataclass(frozen=True)
class ScheduleCard:
    """A schedule created or changed by a tool call of this run, as that revision pinned it."""

    revision: ScheduleRevision
    schedule: Schedule
    changes: list[Change]

    @property
    def created(self) -> bool:
        return self.revision.path == ScheduleRevision.Path.CREATE

    @property
    def limits(self) -> RunLimits:
        return self.revision.run_limits

    @property
    def reserves(self) -> str:
        """ "2 steps / 2 model calls / USD 1.00", or "none"."""
        limits = self.limits
        parts = [
            f"{limits.synthesis_reserve_steps} steps" if limits.synthesis_reserve_steps else "",
            f"{limits.synthesis_reserve_model_calls} model calls"
            if limits.synthesis_reserve_model_calls
            else "",
            f"{limits.synthesis_reserve_tool_calls} tool calls"
            if limits.synthesis_reserve_tool_calls
            else "",
            money_text(limits.synthesis_reserve_cost) if limits.synthesis_reserve_cost else "",
        ]
        return " / ".join(p for p in parts if p) or "none"


@dataclass(frozen=True)
class Refusal:
    """schedule.update refused to change limits: what was asked, and what to do instead."""

    schedule_id: int | None
    schedule: Schedule | None
    asked: str


@dataclass(frozen=True)
class Exchange:
    run: Run
    steps: list[Step]
    cards: list[ScheduleCard]
    refusals: list[Refusal]
    bars: list[Bar]
    failure: Failure | None
    synthesis_reason: str
    # Schedules its schedule.create calls proposed, waiting for (or given) the owner's confirmation.
    proposals: list[proposals.ProposalCard] = field(default_factory=list)

    @property
    def in_flight(self) -> bool:
        return not self.run.is_terminal

    @property
    def usage_line(self) -> str:
        run = self.run
        counts = ((run.steps, "step"), (run.model_calls, "model call"), (run.tool_calls, "tool call"))
        return " · ".join(
            [
                *(f"{n} {words}{'' if n == 1 else 's'}" for n, words in counts),
                money_text(run.cost, exact=True),
            ]
        )


@dataclass(frozen=True)
class Thread:
    conversation: Conversation
    agent: Agent | None
    exchanges: list[Exchange]
    earlier: bool  # older exchanges exist than those shown
    schedule: Schedule | None = None  # a scheduled run's conversation: its schedule
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def in_flight(self) -> Exchange | None:
        last = self.exchanges[-1] if self.exchanges else None
        return last if last is not None and last.in_flight else None

    @property
    def history_bounded(self) -> bool:
        """The newest message was sent without some older exchanges (the agent's bound)."""
        return bool(self.exchanges) and self.exchanges[-1].run.history_omitted

    @property
    def last_before(self) -> int | None:
        return self.exchanges[0].run.pk if self.earlier and self.exchanges else None


def conversation_thread(
    conversation: Conversation, *, before: int | None = None, last: int = THREAD_RUNS
) -> Thread:
    """The newest `last` exchanges (before run `before`, for the older page), oldest first."""
    runs_query = conversation.runs.filter(kind=Run.Kind.INTERACTIVE).select_related("agent")
    if before is not None:
        runs_query = runs_query.filter(pk__lt=before)
    newest = list(runs_query.order_by("-pk")[: last + 1])
    runs = newest[:last][::-1]
    entries = _entries(runs)
    cards, refusals = _cards(conversation, runs, entries)
    proposed = _proposals(conversation, runs)
    agent = conversation.agent if conversation.agent_id else (runs[-1].agent if runs else None)
    schedule = None
    if conversation.is_scheduled and conversation.schedule_id:
        schedule = Schedule.objects.filter(
            owner_id=conversation.owner_id, pk=conversation.schedule_id
        ).first()
    exchanges = [
        Exchange(
            run=run,
            steps=_steps(run, entries.get(run.pk, [])),
            cards=cards.get(run.pk, []),
            refusals=refusals.get(run.pk, []),
            bars=run_bars(run),
            failure=Failure.from_run(run),
            synthesis_reason=synthesis_reason(run),
            proposals=proposed.get(run.pk, []),
        )
        for run in runs
    ]
    return Thread(conversation, agent, exchanges, earlier=len(newest) > last, schedule=schedule)


def _proposals(conversation: Conversation, runs: list[Run]) -> dict[int, list[proposals.ProposalCard]]:
    """The proposals these runs made, as cards, by run (one query, and the month's forecast when
    one of them is open: schedules.proposals.cards)."""
    found: dict[int, list[proposals.ProposalCard]] = defaultdict(list)
    if not runs:
        return found
    rows = list(
        Proposal.objects.filter(conversation_id=conversation.pk, run_id__in=[r.pk for r in runs])
        .select_related("agent")
        .order_by("created_at", "id")
    )
    for card in proposals.cards(rows, conversation.owner_id):
        assert card.proposal.run_id is not None
        found[card.proposal.run_id].append(card)
    return found


def _entries(runs: list[Run]) -> dict[int, list[TranscriptEntry]]:
    grouped: dict[int, list[TranscriptEntry]] = defaultdict(list)
    if runs:
        rows = TranscriptEntry.objects.filter(run_id__in=[r.pk for r in runs], seq__gt=0).order_by(
            "run_id", "seq"
        )
        for entry in rows:
            grouped[entry.run_id].append(entry)
    return grouped


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= SHORT_RESULT_CHARS else line[: SHORT_RESULT_CHARS - 1] + "…"


def _arguments(call: dict[str, Any]) -> str:
    value = call.get("arguments")
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)[:SHORT_RESULT_CHARS]
    return str(value or "{}")[:SHORT_RESULT_CHARS]


def _steps(run: Run, entries: list[TranscriptEntry]) -> list[Step]:
    """Each step: the model's text and its tool calls, each with its result once recorded. The
    completed run's final model turn is its answer, shown as such rather than as a step."""
    results = {e.tool_call_id: e for e in entries if e.role == TranscriptEntry.Role.TOOL}
    steps = []
    for entry in entries:
        if entry.role != TranscriptEntry.Role.ASSISTANT:
            continue
        tools = []
        for call in entry.tool_calls:
            result = results.get(str(call.get("id", ""))[:128])
            tools.append(
                ToolUse(
                    name=str(call.get("name", "")).replace("_", ".", 1),
                    arguments=_arguments(call),
                    result=_short(result.content) if result else "",
                    is_error=bool(result and result.is_error),
                    done=result is not None,
                )
            )
        synthesis = run.synthesis_step is not None and entry.step >= run.synthesis_step > 0
        steps.append(Step(entry.step, entry.content, tools, synthesis))
    if run.status == Run.Status.COMPLETED and steps and not steps[-1].tools:
        steps = steps[:-1]
    return steps


def _cards(
    conversation: Conversation, runs: list[Run], entries: dict[int, list[TranscriptEntry]]
) -> tuple[dict[int, list[ScheduleCard]], dict[int, list[Refusal]]]:
    """Schedule cards from the revisions these runs wrote (two queries), and refusals from
    their schedule.update results (one query for the schedules they name)."""
    cards: dict[int, list[ScheduleCard]] = defaultdict(list)
    refusals: dict[int, list[Refusal]] = defaultdict(list)
    if not runs:
        return cards, refusals
    revisions = list(
        ScheduleRevision.objects.filter(conversation_id=conversation.pk, run_id__in=[r.pk for r in runs])
        .select_related("schedule", "agent")
        .order_by("created_at", "id")
    )
    earlier = _previous_revisions([r for r in revisions if r.number > 1])
    for revision in revisions:
        before = earlier.get((revision.schedule_id, revision.number - 1))
        changes = diff(revision_snapshot(before), revision_snapshot(revision)) if before else []
        assert revision.run_id is not None
        cards[revision.run_id].append(ScheduleCard(revision, revision.schedule, changes))
    asked = _limit_refusals(entries)
    ids = {schedule_id for found in asked.values() for schedule_id, _ in found if schedule_id}
    schedules = Schedule.objects.filter(owner_id=conversation.owner_id).in_bulk(ids) if ids else {}
    for run_id, found in asked.items():
        for schedule_id, what in found:
            refusals[run_id].append(Refusal(schedule_id, schedules.get(schedule_id or 0), what))
    return cards, refusals


def _previous_revisions(revisions: list[ScheduleRevision]) -> dict[tuple[int, int], ScheduleRevision]:
    if not revisions:
        return {}
    wanted = Q()
    for revision in revisions:
        wanted |= Q(schedule_id=revision.schedule_id, number=revision.number - 1)
    rows = ScheduleRevision.objects.filter(wanted).select_related("agent")
    return {(r.schedule_id, r.number): r for r in rows}


def _limit_refusals(entries: dict[int, list[TranscriptEntry]]) -> dict[int, list[tuple[int | None, str]]]:
    """(schedule id, what was asked) of each schedule.update call refused for touching limits."""
    found: dict[int, list[tuple[int | None, str]]] = defaultdict(list)
    for run_id, rows in entries.items():
        calls = {
            str(call.get("id", ""))[:128]: call
            for entry in rows
            if entry.role == TranscriptEntry.Role.ASSISTANT
            for call in entry.tool_calls
        }
        for entry in rows:
            if not (
                entry.role == TranscriptEntry.Role.TOOL and entry.is_error and LIMITS_REFUSAL in entry.content
            ):
                continue
            arguments = calls.get(entry.tool_call_id, {}).get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {}
            arguments = arguments if isinstance(arguments, dict) else {}
            schedule_id = arguments.get("schedule_id")
            asked = ", ".join(
                f"{key.replace('_', ' ')} {'USD ' if key.endswith('_cost') else ''}{value}"
                for key, value in arguments.items()
                if key != "schedule_id"
            )
            found[run_id].append((schedule_id if isinstance(schedule_id, int) else None, asked))
    return found


def chat_conversations(owner_id: int, conversation_ids: set[int]) -> set[int]:
    """Which of these conversations (named by chat revisions) still exist: one query."""
    if not conversation_ids:
        return set()
    return set(
        Conversation.objects.filter(owner_id=owner_id, pk__in=conversation_ids).values_list("pk", flat=True)
    )
