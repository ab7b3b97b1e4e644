"""The run page and the conversations pages."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Count, Min, Q, Sum

from accounting.formatting import money_text
from accounting.ledger import ZERO
from accounting.models import AccountingEvent, LedgerEntry
from accounting.selectors import calls_of
from runs.failures import Failure
from runs.limits import DIMENSIONS
from runs.models import Conversation, Run, TranscriptEntry
from schedules.models import Occurrence, Schedule
from schedules.selectors.schedules import PER_PAGE

# -- run detail ---------------------------------------------------------------------------------

LABELS: dict[str, str] = {
    "steps": "Steps",
    "model_calls": "Model calls",
    "tool_calls": "Tool calls",
    "cost": "Cost",
}


@dataclass(frozen=True)
class Bar:
    """One governed dimension: usage against the limit, with the synthesis reserve marked."""

    dimension: str
    label: str
    used: int | Decimal
    total: int | Decimal
    reserve: int | Decimal
    activated: bool
    exhausted: bool

    @property
    def money(self) -> bool:
        return self.dimension == "cost"

    def _amount(self, value: int | Decimal) -> str:
        return money_text(value, exact=True) if self.money else str(value)

    @property
    def used_text(self) -> str:
        if self.money:
            return f"{money_text(self.used, exact=True)} of {money_text(self.total)}"
        return f"{self.used} of {self.total} {self.label.lower()}"

    @property
    def reserve_text(self) -> str:
        return f"reserve {self._amount(self.reserve)}" if self.reserve > 0 else "no reserve"

    @property
    def over(self) -> bool:
        return self.used > self.total

    @property
    def reserve_start(self) -> int | Decimal:
        """Where the reserve begins: the usage at which the next request is synthesis-only."""
        return self.total - self.reserve


@dataclass(frozen=True)
class Turn:
    step: int
    entries: list[TranscriptEntry]
    synthesis: bool


@dataclass(frozen=True)
class RunPage:
    run: Run
    bars: list[Bar]
    failure: Failure | None
    turns: list[Turn]
    occurrence: Occurrence | None
    synthesis_reason: str = ""
    parent_id: int | None = None
    children: list[Run] = field(default_factory=list)
    calls: list[LedgerEntry] = field(default_factory=list)

    @property
    def call_totals(self) -> dict[str, Any]:
        """The calls' tokens by kind and charge, summed (the table's last row)."""
        fields = ("input_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens")
        totals: dict[str, Any] = {name: sum(getattr(c, name) for c in self.calls) for name in fields}
        totals["uncached"] = sum(c.uncached_input_tokens for c in self.calls)
        totals["cache_write"] = totals["cache_write_5m_tokens"] + totals["cache_write_1h_tokens"]
        totals["output_tokens"] = sum(c.output_tokens for c in self.calls)
        totals["reasoning_tokens"] = sum(c.reasoning_tokens for c in self.calls)
        totals["cost"] = sum((c.cost for c in self.calls), Decimal(0))
        return totals


def run_bars(run: Run) -> list[Bar]:
    limits = run.run_limits
    return [
        Bar(
            dimension=d,
            label=LABELS[d],
            used=run.used(d),
            total=limits.total(d),
            reserve=limits.reserve(d),
            activated=run.synthesis_dimension == d,
            exhausted=run.failure_reason == Run.FailureReason.BUDGET_EXHAUSTED and run.failure_dimension == d,
        )
        for d in DIMENSIONS
    ]


def synthesis_reason(run: Run) -> str:
    """Why the run's requests became synthesis-only, in words (docs/contract.md#the-run-loop, rule 2)."""
    dimension = run.synthesis_dimension
    if not dimension:
        return ""
    if dimension == "tool_calls" and run.run_limits.synthesis_reserve_tool_calls == 0:
        return "the tool-call budget was used up, which owes the run one synthesis-only turn"
    return f"the {dimension.replace('_', ' ')} reserve was reached"


def run_page(run: Run) -> RunPage:
    """The run, its bars, its transcript grouped by step, the occurrence it ran and its provider
    calls as the ledger recorded them (five queries)."""
    entries = list(run.transcript.order_by("seq"))
    turns: list[Turn] = []
    for entry in entries:
        if not turns or turns[-1].step != entry.step:
            synthesis = run.synthesis_step is not None and entry.step >= run.synthesis_step > 0
            turns.append(Turn(entry.step, [], synthesis))
        turns[-1].entries.append(entry)
    occurrence = Occurrence.objects.filter(run_id=run.pk).select_related("schedule").first()
    children = list(run.children.only("id", "status", "cost").order_by("id"))
    return RunPage(
        run=run,
        bars=run_bars(run),
        failure=Failure.from_run(run),
        turns=turns,
        occurrence=occurrence,
        synthesis_reason=synthesis_reason(run),
        parent_id=run.parent_id,
        children=children,
        calls=calls_of([run.pk]).get(run.pk, []),
    )


# -- conversations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConversationRow:
    conversation: Conversation
    runs: int
    failed: int
    cost: Decimal
    schedule: Schedule | None
    schedule_deleted: bool
    in_flight: bool = False
    agent_name: str = ""


@dataclass(frozen=True)
class ConversationPage:
    rows: list[ConversationRow]
    number: int
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1


MAX_PAGE = 100_000  # past any real history; keeps the offset within what the database takes


def _page_number(page: str | int | None) -> int:
    try:
        return min(MAX_PAGE, max(1, int(page or 1)))
    except (TypeError, ValueError):
        return 1


def conversation_page(owner_id: int, page: str | int | None) -> ConversationPage:
    """Newest activity first, without counting the table: a page and whether another follows
    (three queries)."""
    number = _page_number(page)
    offset = (number - 1) * PER_PAGE
    conversations = list(
        Conversation.objects.filter(owner_id=owner_id)
        .select_related("agent")
        .order_by("-last_activity_at", "-id")[offset : offset + PER_PAGE + 1]
    )
    shown = conversations[:PER_PAGE]
    totals: dict[int, dict[str, Any]] = {
        row["conversation_id"]: dict(row)
        for row in Run.objects.filter(conversation__in=shown)
        .values("conversation_id")
        .annotate(
            runs=Count("id", filter=~Q(kind=Run.Kind.DELEGATED)),
            failed=Count("id", filter=Q(status=Run.Status.FAILED) & ~Q(kind=Run.Kind.DELEGATED)),
            cost=Sum("cost", filter=~Q(kind=Run.Kind.DELEGATED)),
            in_flight=Count("id", filter=Q(status__in=[Run.Status.QUEUED, Run.Status.RUNNING])),
            agent_name=Min("agent__name"),
        )
    }
    schedule_ids = {c.schedule_id for c in shown if c.schedule_id is not None}
    schedules = Schedule.objects.filter(owner_id=owner_id).in_bulk(schedule_ids) if schedule_ids else {}
    rows = []
    for conversation in shown:
        total: dict[str, Any] = totals.get(conversation.pk, {})
        schedule_id = conversation.schedule_id
        rows.append(
            ConversationRow(
                conversation=conversation,
                runs=int(total.get("runs", 0)),
                failed=int(total.get("failed", 0)),
                cost=total.get("cost") or ZERO,
                schedule=schedules.get(schedule_id) if schedule_id else None,
                schedule_deleted=schedule_id is not None and schedule_id not in schedules,
                in_flight=bool(total.get("in_flight")),
                agent_name=conversation.agent.name
                if conversation.agent
                else str(total.get("agent_name") or ""),
            )
        )
    return ConversationPage(rows, number, has_next=len(conversations) > PER_PAGE)


@dataclass(frozen=True)
class DeletionSummary:
    """What deleting a conversation removes, and what stays."""

    conversation: Conversation
    runs: int
    transcript_entries: int
    failure_messages: int
    spend: Decimal
    events: int
    schedule: Schedule | None
    in_flight: bool


def deletion_summary(conversation: Conversation) -> DeletionSummary:
    run_ids = list(Run.objects.filter(conversation=conversation).values_list("pk", flat=True))
    runs = Run.objects.filter(pk__in=run_ids).aggregate(
        failures=Count("id", filter=~Q(failure_message="")),
        in_flight=Count("id", filter=Q(status__in=[Run.Status.QUEUED, Run.Status.RUNNING])),
    )
    schedule_id = conversation.schedule_id
    schedule = (
        Schedule.objects.filter(owner_id=conversation.owner_id, pk=schedule_id).first()
        if schedule_id
        else None
    )
    return DeletionSummary(
        conversation=conversation,
        runs=len(run_ids),
        transcript_entries=TranscriptEntry.objects.filter(run_id__in=run_ids).count(),
        failure_messages=runs["failures"],
        spend=LedgerEntry.objects.filter(run_id__in=run_ids).aggregate(total=Sum("cost"))["total"] or ZERO,
        events=AccountingEvent.objects.filter(run_id__in=run_ids).count(),
        schedule=schedule,
        in_flight=runs["in_flight"] > 0,
    )
