"""Revision requests: a schedule's recent runs as recorded, what other limits would have done to
them, the limits to suggest, and whether resuming a paused schedule will help.

The record is content-free and outlives conversations: each run's `schedule.run_accounted` event
(status, usage, classification), its ledger entries (one per model call, so one per step, with
its cost) and, while the run's conversation exists, its transcript (the tool calls each step
asked for).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from accounting.formatting import local_text, money_text
from accounting.ledger import ZERO
from accounting.models import AccountingEvent, LedgerEntry
from accounting.money import MONEY_PLACES, format_money, parse_money
from accounting.timezones import owner_zone
from runs.failures import Failure, Reason
from runs.limits import MAX_COST, MAX_COUNT, RunLimits, validate_limits, with_reserves
from runs.models import Run, TranscriptEntry
from runs.replay import ESTIMATE_NOTE, Ending, Replay, Step, Verdict, replay
from schedules.models import RevisionRequest, Schedule, ScheduleRevision

REPLAYED_RUNS = 20
REQUESTS_SHOWN = 10
# The schedule.create policy's reserves (docs/decisions/0002, point 2), suggested where today's is zero.
POLICY_RESERVES: Mapping[str, int | Decimal] = {
    "steps": 2,
    "model_calls": 2,
    "tool_calls": 0,
    "cost": Decimal("1.00"),
}
HEADROOM = Decimal("1.5")  # a suggestion is the highest recent use plus half again


def _money(value: Any) -> Decimal:
    """An amount our own code stored (an event's usage): read by the one money parser."""
    try:
        return parse_money(value, "cost", places=MONEY_PLACES)
    except ValueError:
        return ZERO


# -- the record ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRun:
    """One accounted run of the schedule, with each step's recorded usage."""

    run_id: int | None
    scheduled_for: datetime | None
    revision: int | None
    status: str
    failure: Failure | None
    usage: Mapping[str, Any]
    cost: Decimal
    steps: tuple[Step, ...]
    estimated: bool  # tool calls per step spread from the totals: the transcript is gone
    run_exists: bool

    @property
    def ending(self) -> Ending:
        if self.status == Run.Status.COMPLETED:
            return Ending.ANSWERED
        if self.failure is not None and self.failure.reason in (
            Reason.BUDGET_EXHAUSTED,
            Reason.SYNTHESIS_RESERVE_VIOLATION,
        ):
            return Ending.LIMITS
        return Ending.OTHER

    def used(self, dimension: str) -> int | Decimal:
        if dimension == "cost":
            return self.cost
        value = self.usage.get(dimension, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


def recorded_runs(schedule: Schedule, *, count: int = REPLAYED_RUNS) -> list[RecordedRun]:
    """The schedule's last `count` accounted runs, newest first (four queries, whatever their
    number of steps)."""
    events = list(
        AccountingEvent.objects.filter(
            schedule_id=schedule.pk, event=AccountingEvent.Kind.RUN_ACCOUNTED
        ).order_by("-created_at", "-id")[:count]
    )
    run_ids = [e.run_id for e in events if e.run_id]
    costs: dict[int, list[Decimal]] = defaultdict(list)
    asked: dict[int, dict[int, int]] = defaultdict(dict)
    runs: dict[int, tuple[str, dict[str, Any]]] = {}
    if run_ids:
        ledger = LedgerEntry.objects.filter(owner_id=schedule.owner_id, run_id__in=run_ids)
        for run_id, cost in ledger.order_by("created_at", "id").values_list("run_id", "cost"):
            costs[run_id].append(cost)
        answers = TranscriptEntry.objects.filter(run_id__in=run_ids, role=TranscriptEntry.Role.ASSISTANT)
        for run_id, step, calls in answers.values_list("run_id", "step", "tool_calls"):
            asked[run_id][step] = len(calls) if isinstance(calls, list) else 0
        rows = Run.objects.filter(owner_id=schedule.owner_id, pk__in=run_ids)
        runs = {
            pk: (dimension, limits)
            for pk, dimension, limits in rows.values_list("pk", "failure_dimension", "limits")
        }
    return [
        _recorded(e, costs.get(e.run_id or 0, []), asked.get(e.run_id or 0), runs.get(e.run_id or 0))
        for e in events
    ]


def _recorded(
    event: AccountingEvent,
    costs: list[Decimal],
    asked: dict[int, int] | None,
    run: tuple[str, dict[str, Any]] | None,
) -> RecordedRun:
    payload = event.payload
    usage = payload.get("usage") or {}
    counted = usage.get("steps", len(costs))
    costs = costs[: counted if isinstance(counted, int) else len(costs)]  # a late call is not a step
    status = str(payload.get("status", ""))
    dimension, limits = run if run is not None else ("", {})
    limit = None
    if dimension and limits.get(f"max_{dimension}") is not None:
        value = limits[f"max_{dimension}"]
        limit = _money(value) if dimension == "cost" else int(value)
    failure = Failure.from_payload(event.failure, dimension, limit=limit)
    estimated = asked is None
    tool_calls = _spread(usage.get("tool_calls", 0), len(costs), status) if asked is None else None
    steps = tuple(
        Step(
            cost=cost,
            tool_calls=(asked or {}).get(number, 0) if tool_calls is None else tool_calls[number - 1],
        )
        for number, cost in enumerate(costs, start=1)
    )
    scheduled = payload.get("scheduled_for")
    try:
        scheduled_for = datetime.fromisoformat(scheduled) if isinstance(scheduled, str) else None
    except ValueError:
        scheduled_for = None
    return RecordedRun(
        run_id=event.run_id,
        scheduled_for=scheduled_for,
        revision=payload.get("revision") if isinstance(payload.get("revision"), int) else None,
        status=status,
        failure=failure,
        usage=usage,
        cost=sum(costs, ZERO) if costs else _money(usage.get("cost", "0")),
        steps=steps,
        estimated=estimated and bool(costs),
        run_exists=run is not None,
    )


def _spread(total: Any, steps: int, status: str) -> list[int]:
    """Tool calls per step when only the run's total survives: spread over the steps that were
    not its final answer, the earliest first."""
    total = total if isinstance(total, int) and total > 0 else 0
    asking = steps - 1 if status == Run.Status.COMPLETED and steps else steps
    spread = [0] * steps
    for index in range(asking):
        share = math.ceil((total - sum(spread)) / (asking - index)) if asking - index else 0
        spread[index] = share
    return spread


# -- the replay -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayRow:
    run: RecordedRun
    replay: Replay
    words: str

    @property
    def tone(self) -> str:
        return {
            Verdict.FITS: "ok",
            Verdict.SYNTHESIS: "info",
            Verdict.EXHAUSTED: "bad",
            Verdict.CONTINUES: "warn",
        }.get(self.replay.verdict, "muted")


@dataclass(frozen=True)
class ReplayReport:
    limits: RunLimits
    rows: list[ReplayRow]
    note: str = ESTIMATE_NOTE

    def count(self, verdict: str) -> int:
        return sum(1 for row in self.rows if row.replay.verdict == verdict)

    @property
    def summary(self) -> str:
        """ "Of the last 2 runs, with these limits: 2 would be told to answer in their synthesis
        turn, none would run out." """
        if not self.rows:
            return ""
        runs = "run" if len(self.rows) == 1 else f"{len(self.rows)} runs"
        phrases = [
            (self.count(Verdict.FITS), "would answer within them"),
            (self.count(Verdict.SYNTHESIS), "would be told to write their answer from the synthesis reserve"),
            (self.count(Verdict.CONTINUES), "would go on past the end of their record"),
            (
                self.count(Verdict.UNCHANGED) + self.count(Verdict.NO_USAGE),
                "failed for a reason limits do not change",
            ),
        ]
        parts = [f"{count} {words}" for count, words in phrases if count]
        exhausted = self.count(Verdict.EXHAUSTED)
        parts.append(f"{exhausted} would run out" if exhausted else "none would run out")
        return f"Of the last {runs}: " + "; ".join(parts) + "."


def replay_report(runs: Sequence[RecordedRun], limits: RunLimits) -> ReplayReport:
    rows = []
    for run in runs:
        result = replay(limits, run.steps, ending=run.ending)
        rows.append(ReplayRow(run, result, verdict_words(result, limits, run)))
    return ReplayReport(limits, rows)


def _dimension_words(dimension: str | None) -> str:
    return (dimension or "budget").replace("_", " ")


def verdict_words(result: Replay, limits: RunLimits, run: RecordedRun) -> str:
    """What the limits would have done, in a sentence."""
    verdict, step = result.verdict, result.step
    if verdict == Verdict.FITS:
        return f"Answers within them ({money_text(result.cost, exact=True)}, {step} steps)."
    if verdict == Verdict.SYNTHESIS:
        if result.dimension == "tool_calls" and limits.synthesis_reserve_tool_calls == 0:
            why = "its tool calls are used up"
        else:
            why = f"the {_dimension_words(result.dimension)} reserve is reached"
        return f"Told to write its answer at step {step}: {why}."
    if verdict == Verdict.EXHAUSTED:
        return f"Runs out of {_dimension_words(result.dimension)} before step {step}, with no answer."
    if verdict == Verdict.CONTINUES:
        left = money_text(limits.max_cost - result.cost)
        return f"Goes on past step {(step or 1) - 1}, where its record ends, with {left} of the budget left."
    if verdict == Verdict.UNCHANGED:
        cause = run.failure.what.lower() if run.failure else "it ended another way"
        return f"The limits were not what stopped it: {cause}."
    return "No model call was answered, so limits make no difference."


# -- the suggestion -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    limits: RunLimits
    max_consecutive_failures: int
    basis: str  # the rule, in words, with the figures it used


SUGGESTION_RULE = (
    "Reserves: today's, or the standard 2 steps, 2 model calls and USD 1.00 where today's is none, "
    "each only below its total. Cost: the most expensive recent run plus half again, with the cost "
    "reserve on top (the run's work should not eat into it), rounded up to whole dollars, never "
    "below today's limit. Steps, model calls, tool calls: today's, or half again when a recent run "
    "used them all. Failure limit: today's."
)


def suggested_limits(current: ScheduleRevision, runs: Sequence[RecordedRun]) -> Suggestion:
    """The limits a request is prefilled with (SUGGESTION_RULE), from the runs' recorded usage."""
    today = current.run_limits
    highest = max((run.cost for run in runs), default=ZERO)
    reserve_cost = max(today.synthesis_reserve_cost, POLICY_RESERVES["cost"]) if runs else ZERO
    cost = (highest * HEADROOM + reserve_cost).to_integral_value(rounding=ROUND_CEILING)
    totals: dict[str, Any] = {"max_cost": min(max(today.max_cost, cost), MAX_COST - 1)}
    for dimension in ("steps", "model_calls", "tool_calls"):
        limit = int(today.total(dimension))
        used_all = any(int(run.used(dimension)) >= limit for run in runs) and limit > 0
        grown = math.ceil(limit * HEADROOM) if used_all else limit
        totals[f"max_{dimension}"] = min(grown, MAX_COUNT)
    grown_limits = today.model_copy(update=totals)
    reserves = {d: max(today.reserve(d), POLICY_RESERVES[d]) for d in POLICY_RESERVES}  # type: ignore[arg-type]
    limits = validate_limits(with_reserves(grown_limits, **reserves).to_json())  # type: ignore[arg-type]
    if not runs:
        basis = "No run has been recorded yet, so these are today's limits with the standard reserves."
    else:
        basis = (
            f"Prefilled from the last {len(runs)} run{'s' if len(runs) != 1 else ''}: the most expensive "
            f"cost {money_text(highest, exact=True)}, so {money_text(limits.max_cost)} per run"
            + (
                f" with {money_text(limits.synthesis_reserve_cost)} of it kept for the final answer."
                if limits.synthesis_reserve_cost
                else "."
            )
        )
    return Suggestion(limits, current.max_consecutive_failures, basis)


# -- requests on the schedule page ------------------------------------------------------------------


def schedule_requests(schedule: Schedule) -> list[RevisionRequest]:
    """The schedule's newest revision requests, with who asked and decided (one query)."""
    return list(
        RevisionRequest.objects.filter(schedule=schedule)
        .select_related("requested_by", "decided_by", "revision")
        .order_by("-created_at", "-id")[:REQUESTS_SHOWN]
    )


def open_request(requests: Sequence[RevisionRequest]) -> RevisionRequest | None:
    return next((r for r in requests if r.is_open), None)


# -- will resuming help? ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Counted:
    """A failed run counted by the pause, in the words of the failure vocabulary."""

    failure: Failure
    event: AccountingEvent
    day: datetime | None

    @property
    def revision(self) -> int | None:
        value = self.event.payload.get("revision")
        return value if isinstance(value, int) else None

    def used(self, dimension: str) -> int | Decimal:
        usage = self.event.payload.get("usage") or {}
        if dimension == "cost":
            return _money(usage.get("cost", "0"))
        value = usage.get(dimension, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class FailureGroup:
    """Counted failures that read the same, shown once: "30 Nov and 23 Nov: The run used ..."."""

    failure: Failure
    days: str
    run_ids: list[int]

    @property
    def runs(self) -> str:
        if not self.run_ids:
            return ""
        label = "run" if len(self.run_ids) == 1 else "runs"
        return f"{label} {_listed([str(i) for i in self.run_ids])}"


def failure_groups(counted: Sequence[Counted], zone: Any) -> list[FailureGroup]:
    """Neighbouring failures with the same words and identifiers, together (newest first)."""
    groups: list[tuple[Failure, list[Counted]]] = []
    for item in counted:
        key = (item.failure.headline, item.failure.identifiers)
        if groups and (groups[-1][0].headline, groups[-1][0].identifiers) == key:
            groups[-1][1].append(item)
        else:
            groups.append((item.failure, [item]))
    return [
        FailureGroup(
            failure,
            _listed([local_text(i.day, zone, "day") for i in items if i.day])
            if any(i.day for i in items)
            else "",
            [i.event.run_id for i in items if i.event.run_id],
        )
        for failure, items in groups
    ]


@dataclass(frozen=True)
class Advice:
    """Whether resuming is likely to help, with the figures, and what to do instead."""

    helps: bool | None
    sentence: str
    action: str = ""  # "request": ask for bigger limits; "edit": change the prompt
    waiting: RevisionRequest | None = None  # the open request, already asked
    declined: RevisionRequest | None = None  # the newest request, declined since the pause


def _shown(dimension: str, value: int | Decimal) -> str:
    return money_text(value, exact=True) if dimension == "cost" else str(value)


def _budget_dimension(newest: Counted, limits: RunLimits) -> str:
    """The dimension a budget failure named; read from the usage when the run (and with it the
    dimension) was deleted with its conversation."""
    if newest.failure.dimension:
        return newest.failure.dimension
    for dimension in ("cost", "steps", "model_calls"):
        if newest.used(dimension) >= limits.total(dimension):
            return dimension
    return "cost"


def _listed(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def resume_advice(
    counted: Sequence[Counted],
    current: ScheduleRevision,
    requests: Sequence[RevisionRequest],
    paused_at: datetime,
) -> Advice | None:
    """Will resuming help, judged from the newest counted failure and the limits in force now."""
    if not counted:
        return None
    waiting = open_request(requests)
    newest_request = requests[0] if requests else None
    declined = (
        newest_request
        if newest_request is not None
        and newest_request.state == RevisionRequest.State.DECLINED
        and newest_request.decided_at is not None
        and newest_request.decided_at >= paused_at
        else None
    )
    newest = counted[0]
    failure = newest.failure
    revised = current.number > max((c.revision or 0) for c in counted)
    limits = current.run_limits
    if failure.reason == Reason.BUDGET_EXHAUSTED:
        dimension = _budget_dimension(newest, limits)
        budget = [c for c in counted if c.failure.reason == Reason.BUDGET_EXHAUSTED]
        used = [c.used(dimension) for c in reversed(budget)]  # oldest first, as they happened
        limit = limits.total(dimension)  # type: ignore[arg-type]
        figures = _listed([_shown(dimension, u) for u in used])
        runs = "the last run" if len(used) == 1 else f"the last {len(used)} runs"
        noun = "" if dimension == "cost" else f" {_dimension_words(dimension)}"
        verb = "cost" if dimension == "cost" else "used"
        if revised and all(u < limit for u in used):
            sentence = (
                f"The limits were raised since: revision {current.number} allows {_shown(dimension, limit)}"
                f"{noun} per run, and {runs} {verb} {figures}{noun}. Resuming runs with the new limits."
            )
            return Advice(True, sentence, waiting=waiting, declined=declined)
        # A run that ran out under the limits in force now needed more than they allow, whatever it
        # spent: with each call bounded before it is made, a cost never crosses its limit.
        if not revised or all(u >= limit for u in used):
            sentence = (
                f"Resuming will not help: {runs} {verb} {figures}{noun} and ran out of the limit of "
                f"{_shown(dimension, limit)}{noun} per run, so the next run will likely stop the same way."
            )
            return Advice(False, sentence, action="request", waiting=waiting, declined=declined)
        sentence = f"Some recent runs fit in {_shown(dimension, limit)}{noun}: resuming may help."
        return Advice(None, sentence, action="request", waiting=waiting, declined=declined)
    if failure.passes is False:
        if revised:
            sentence = (
                f"The schedule changed since these runs (revision {current.number}): resuming tries it."
            )
            return Advice(None, sentence, waiting=waiting, declined=declined)
        sentence = f"Resuming will not help until {failure.change_first}."
        return Advice(
            False, sentence, action="edit" if failure.owner_fixes else "", waiting=waiting, declined=declined
        )
    if failure.passes:
        return Advice(True, "Resuming should help.", waiting=waiting, declined=declined)
    return Advice(None, "", waiting=waiting, declined=declined)


# -- what a monthly cap would have skipped ------------------------------------------------------------

CAP_MONTHS = 6  # the months of history a cap is replayed against


@dataclass(frozen=True)
class CapMonth:
    """One calendar month of the schedule's accounted runs (the owner's zone), replayed against a cap:
    a slot is skipped when the month's spend so far plus the run's cost limit would be above it."""

    month: date
    runs: int
    spent: Decimal
    would_run: int
    first_skip: datetime | None

    @property
    def skipped(self) -> int:
        return self.runs - self.would_run


def cap_replay(
    schedule: Schedule, cap: Decimal | None, max_cost: Decimal, zone_name: str, *, now: datetime | None = None
) -> list[CapMonth]:
    """The last CAP_MONTHS months, newest first, with what `cap` would have let run (one query over the
    content-free accounting events, which outlive the runs). Without a cap: nothing to replay."""
    if cap is None:
        return []
    zone = owner_zone(zone_name)
    since = (now or datetime.now(zone)).astimezone(zone).date().replace(day=1)
    for _ in range(CAP_MONTHS - 1):
        since = (since - timedelta(days=1)).replace(day=1)
    events = AccountingEvent.objects.filter(
        schedule_id=schedule.pk,
        event=AccountingEvent.Kind.RUN_ACCOUNTED,
        created_at__gte=datetime.combine(since, datetime.min.time(), zone),
    ).order_by("created_at", "id")
    months: dict[date, list[tuple[datetime, Decimal]]] = defaultdict(list)
    for created_at, payload in events.values_list("created_at", "payload"):
        when = created_at.astimezone(zone)
        cost = parse_money(str((payload.get("usage") or {}).get("cost", "0")), "cost", places=MONEY_PLACES)
        months[when.date().replace(day=1)].append((when, cost))
    found = []
    for month in sorted(months, reverse=True):
        spent, ran, first_skip = ZERO, 0, None
        for when, cost in months[month]:
            if spent + max_cost > cap:
                first_skip = first_skip or when
                continue
            spent += cost
            ran += 1
        runs = months[month]
        found.append(CapMonth(month, len(runs), sum((c for _, c in runs), ZERO), ran, first_skip))
    return found


# -- the request page ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestPage:
    schedule: Schedule
    runs: list[RecordedRun]
    suggestion: Suggestion
    requests: list[RevisionRequest]

    @property
    def waiting(self) -> RevisionRequest | None:
        return open_request(self.requests)

    @property
    def initial(self) -> dict[str, str]:
        limits = self.suggestion.limits.to_json()
        cap = self.schedule.revision.monthly_cap
        return {
            **{name: str(value) for name, value in limits.items()},
            "max_consecutive_failures": str(self.suggestion.max_consecutive_failures),
            "monthly_cap": format_money(cap) if cap is not None else "",
        }


def request_page(schedule: Schedule) -> RequestPage:
    """What the request page shows (five queries): the recorded runs, the limits they suggest,
    and the schedule's requests so far."""
    runs = recorded_runs(schedule)
    return RequestPage(schedule, runs, suggested_limits(schedule.revision, runs), schedule_requests(schedule))
