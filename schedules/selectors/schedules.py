"""The schedules list and the schedule detail: fixed query counts, whatever the number of rows."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.db.models import Count, Q, QuerySet

from accounting import selectors as accounting
from accounting.formatting import money_text
from accounting.ledger import ZERO
from accounting.models import AccountingEvent
from accounting.timezones import owner_zone
from runs.failures import Failure
from runs.limits import RunLimits
from runs.models import Run
from schedules.models import (
    NotificationAttempt,
    Occurrence,
    PauseEvent,
    RevisionRequest,
    Schedule,
    ScheduleRevision,
    revision_snapshot,
)
from schedules.selectors.requests import (
    Advice,
    Counted,
    FailureGroup,
    failure_groups,
    resume_advice,
    schedule_requests,
)
from schedules.words import FAILURES_NAMED, count_sentence, pause_explanation, pause_summary

PER_PAGE = 25
REVISIONS_SHOWN = 20
OCCURRENCES_SHOWN = 30
EVENTS_SHOWN = 30
PAUSE_EVENTS_SHOWN = 10


# -- the status panel -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusPanel:
    schedule: Schedule
    failure_limit: int
    explanation: str
    count_sentence: str
    resume_sentence: str
    # A failure-limit pause: when, then each counted failure in plain words, newest first, and
    # whether resuming will help (item by item, before any code).
    summary: str = ""
    failures: list[FailureGroup] = field(default_factory=list)
    advice: Advice | None = None
    unnamed: int = 0  # counted failures older than the ones listed
    requests: list[RevisionRequest] = field(default_factory=list)

    @property
    def paused(self) -> bool:
        return self.schedule.status == Schedule.Status.PAUSED

    @property
    def active(self) -> bool:
        return self.schedule.status == Schedule.Status.ACTIVE

    @property
    def kept_words(self) -> str:
        """The count an active schedule kept, for its badge: "2 of 2 failures kept"."""
        return f"{self.schedule.consecutive_failures} of {self.failure_limit} failures kept"


def _events_query(schedule_id: int) -> QuerySet[AccountingEvent]:
    return AccountingEvent.objects.filter(schedule_id=schedule_id).order_by("-created_at", "-id")


def _failure_dimensions(owner_id: int, run_ids: Iterable[int | None]) -> dict[int, str]:
    """Run id -> the dimension its failure named, for the runs that still exist (one query)."""
    ids = {i for i in run_ids if i}
    if not ids:
        return {}
    rows = Run.objects.filter(owner_id=owner_id, pk__in=ids).values_list("pk", "failure_dimension")
    return {int(pk): dimension for pk, dimension in rows}


def status_panel(
    schedule: Schedule,
    tz: str,
    *,
    events: Sequence[AccountingEvent] | None = None,
    dimensions: Mapping[int, str] | None = None,
    requests: Sequence[RevisionRequest] | None = None,
) -> StatusPanel:
    """The schedule's state in words. Reads the pause's events and the schedule's revision
    requests only when they are not given."""
    limit = schedule.revision.max_consecutive_failures
    count = schedule.consecutive_failures
    explanation = summary = ""
    counted: list[Counted] = []
    advice = None
    pause = schedule.pause
    if requests is None:
        requests = schedule_requests(schedule)
    if schedule.status == Schedule.Status.PAUSED and pause is not None:
        if pause.reason == PauseEvent.Reason.FAILURE_LIMIT and (events is None or _too_few(events, pause)):
            events = list(
                _events_query(schedule.pk).filter(created_at__lte=pause.created_at)[
                    : pause.failures_at_event * 2 + 5
                ]
            )
            dimensions = _failure_dimensions(schedule.owner_id, (e.run_id for e in events))
        explanation = pause_explanation(schedule, pause, events or [], dimensions or {}, tz)
        if pause.reason == PauseEvent.Reason.FAILURE_LIMIT:
            summary = pause_summary(pause, tz)
            counted = _counted(schedule, pause, events or [], dimensions or {})
            advice = resume_advice(counted, schedule.revision, requests, pause.created_at)
    return StatusPanel(
        schedule=schedule,
        failure_limit=limit,
        explanation=explanation,
        count_sentence=count_sentence(count, limit, kept=False),
        resume_sentence=count_sentence(count, limit, kept=True),
        summary=summary,
        failures=failure_groups(counted, owner_zone(tz)),
        advice=advice,
        unnamed=max(0, pause.failures_at_event - len(counted)) if summary and pause else 0,
        requests=list(requests),
    )


def _counted(
    schedule: Schedule, pause: PauseEvent, events: Sequence[AccountingEvent], dimensions: Mapping[int, str]
) -> list[Counted]:
    """The failures the pause counted, newest first, each with the limit its budget failure hit
    (read from the revision it ran under; one query when that is not the one in force)."""
    events = [e for e in events if e.created_at <= pause.created_at and e.failure][
        : min(pause.failures_at_event, FAILURES_NAMED)
    ]
    current = schedule.revision
    numbers = {e.payload.get("revision") for e in events} - {current.number}
    limits = {current.number: current.run_limits}
    if numbers:
        older = ScheduleRevision.objects.filter(schedule_id=schedule.pk, number__in=numbers)
        limits.update({r.number: r.run_limits for r in older.only("number", "limits")})
    counted = []
    for event in events:
        dimension = dimensions.get(event.run_id or 0, "")
        run_limits = limits.get(event.payload.get("revision"))
        limit = run_limits.total(dimension) if run_limits and dimension else None  # type: ignore[arg-type]
        failure = Failure.from_payload(event.failure, dimension, limit=limit)
        assert failure is not None
        scheduled = event.payload.get("scheduled_for")
        try:
            day = datetime.fromisoformat(scheduled) if isinstance(scheduled, str) else None
        except ValueError:
            day = None
        counted.append(Counted(failure, event, day))
    return counted


def _too_few(events: Sequence[AccountingEvent], pause: PauseEvent) -> bool:
    counted = [e for e in events if e.created_at <= pause.created_at and e.failure]
    return len(counted) < min(pause.failures_at_event, FAILURES_NAMED)


# -- the schedules list ------------------------------------------------------------------------

TABS: tuple[tuple[str, str], ...] = (
    ("all", "All"),
    ("paused", "Paused"),
    ("active", "Active"),
    ("completed", "Completed"),
)


# The list's order: paused first, then active, then completed; by title within each.
STATUS_ORDER = (Schedule.Status.PAUSED, Schedule.Status.ACTIVE, Schedule.Status.COMPLETED)


@dataclass(frozen=True)
class Tab:
    key: str
    label: str
    count: int
    selected: bool


@dataclass(frozen=True)
class ScheduleRow:
    schedule: Schedule
    failure_limit: int
    last_status: str
    last_failure: Failure | None
    last_run_id: int | None
    cost_month: Decimal


@dataclass(frozen=True)
class Cursor:
    """Where a page of the list starts or ends: (status, title, id), in the list's order."""

    status: str
    title: str
    id: int

    def encode(self) -> str:
        raw = json.dumps([self.status, self.title, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str | None) -> Cursor | None:
        """A cursor this page gave out, or None for anything else (a tampered one is page 1)."""
        if not text or len(text) > MAX_CURSOR_CHARS:
            return None
        try:
            status, title, pk = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (ValueError, TypeError, binascii.Error):
            return None
        if status not in STATUS_ORDER or not isinstance(title, str) or type(pk) is not int or pk < 1:
            return None
        return cls(status, title, pk)

    @classmethod
    def of(cls, schedule: Schedule) -> Cursor:
        return cls(schedule.status, schedule.title, schedule.pk)


MAX_CURSOR_CHARS = 1000


@dataclass(frozen=True)
class ScheduleList:
    tab: str
    query: str
    tabs: list[Tab]
    rows: list[ScheduleRow]
    start: int  # how many rows come before this page (for "26-50 of 300")
    next_cursor: str = ""
    previous_cursor: str = ""

    @property
    def total(self) -> int:
        return next(t.count for t in self.tabs if t.key == "all")

    @property
    def count(self) -> int:
        return next(t.count for t in self.tabs if t.selected)

    @property
    def first_shown(self) -> int:
        return self.start + 1

    @property
    def last_shown(self) -> int:
        return self.start + len(self.rows)


def schedule_list(
    owner_id: int,
    *,
    tab: str,
    query: str,
    tz: str,
    after: str | None = None,
    before: str | None = None,
    start: int = 0,
) -> ScheduleList:
    """One page of the owner's schedules in the list's order, from a keyset cursor: each page is
    read straight off the (owner, status, title, id) index, however many schedules there are
    (one query for the tab counts, one to three for the page, three for its rows' details)."""
    tab = tab if tab in dict(TABS) else "all"
    mine = Schedule.objects.filter(owner_id=owner_id)
    if query:
        mine = mine.filter(title__icontains=query)  # a trigram index on PostgreSQL
    counted = dict(mine.values_list("status").annotate(n=Count("id")).order_by())
    counts = {key: int(counted.get(key, 0)) for key, _ in TABS if key != "all"}
    counts["all"] = sum(counts.values())
    statuses = list(STATUS_ORDER) if tab == "all" else [Schedule.Status(tab)]
    backwards = before is not None and Cursor.decode(before) is not None
    cursor = Cursor.decode(before if backwards else after)
    page = _page(mine, statuses, cursor, backwards=backwards)
    more = len(page) > PER_PAGE
    page = page[:PER_PAGE]
    if backwards:
        page.reverse()
    start = max(0, min(start, counts[tab]))
    schedules = page
    last_runs = [s.last_event.run_id for s in schedules if s.last_event and s.last_event.run_id]
    dimensions = _failure_dimensions(owner_id, last_runs) if last_runs else {}
    costs = accounting.cost_this_month(owner_id, [s.pk for s in schedules], tz)
    tabs = [Tab(key, label, counts[key], key == tab) for key, label in TABS]
    has_next = (
        bool(schedules) and (more if not backwards else True) and (start + len(schedules) < counts[tab])
    )
    has_previous = bool(schedules) and start > 0
    return ScheduleList(
        tab,
        query,
        tabs,
        [_row(s, dimensions, costs) for s in schedules],
        start=start,
        next_cursor=Cursor.of(schedules[-1]).encode() if has_next else "",
        previous_cursor=Cursor.of(schedules[0]).encode() if has_previous else "",
    )


def _page(
    mine: QuerySet[Schedule], statuses: Sequence[str], cursor: Cursor | None, *, backwards: bool
) -> list[Schedule]:
    """Up to PER_PAGE + 1 schedules after (or, backwards, before) the cursor: one index range per
    status, in the list's order, until the page is full."""
    order = list(reversed(statuses)) if backwards else statuses
    if cursor is not None and cursor.status in order:
        order = order[order.index(cursor.status) :]
    rows: list[Schedule] = []
    for status in order:
        segment = mine.filter(status=status)
        if cursor is not None and status == cursor.status:
            if backwards:
                segment = segment.filter(Q(title__lt=cursor.title) | Q(title=cursor.title, id__lt=cursor.id))
            else:
                segment = segment.filter(Q(title__gt=cursor.title) | Q(title=cursor.title, id__gt=cursor.id))
        ordering = ("-title", "-id") if backwards else ("title", "id")
        wanted = PER_PAGE + 1 - len(rows)
        rows += list(
            segment.select_related("current_revision", "pause", "last_event")
            .defer("current_revision__prompt")
            .order_by(*ordering)[:wanted]
        )
        if len(rows) > PER_PAGE:
            break
    return rows


def _row(schedule: Schedule, dimensions: Mapping[int, str], costs: Mapping[int, Decimal]) -> ScheduleRow:
    event = schedule.last_event
    run_id = event.run_id if event else None
    return ScheduleRow(
        schedule=schedule,
        failure_limit=schedule.revision.max_consecutive_failures,
        last_status=str(event.payload.get("status", "")) if event else "",
        last_failure=Failure.from_payload(event.failure, dimensions.get(run_id or 0, "")) if event else None,
        last_run_id=run_id if run_id in dimensions else None,
        cost_month=costs.get(schedule.pk, ZERO),
    )


# -- the schedule detail --------------------------------------------------------------------------


class Change(NamedTuple):
    """One field a revision changed: its label, the value before and after."""

    field: str
    old: str
    new: str


@dataclass(frozen=True)
class RevisionEntry:
    revision: ScheduleRevision
    changes: list[Change]
    first: bool


MONEY_FIELDS = frozenset({"max_cost", "synthesis_reserve_cost"})


def _shown(field_name: str, value: Any) -> str:
    if field_name in MONEY_FIELDS:
        return money_text(value)
    return str(value)


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """The fields of two revision snapshots that differ, in the order of `after`."""
    return [
        Change(name, _shown(name, before.get(name, "")), _shown(name, value))
        for name, value in after.items()
        if before.get(name) != value
    ]


def revision_history(revisions: Sequence[ScheduleRevision]) -> list[RevisionEntry]:
    """Newest first, each with its diff against the one before (which may be one past the end)."""
    snapshots = [revision_snapshot(r) for r in revisions]
    entries = []
    for index, revision in enumerate(revisions):
        previous = snapshots[index + 1] if index + 1 < len(snapshots) else None
        if previous is None and revision.number > 1:
            continue  # only fetched to diff the next one against
        changes = diff(previous, snapshots[index]) if previous is not None else []
        entries.append(RevisionEntry(revision, changes, first=previous is None))
    return entries


@dataclass(frozen=True)
class EventEntry:
    event: AccountingEvent
    late: bool  # the usage of a call that returned after the run was accounted
    status: str
    failure: Failure | None
    run_exists: bool
    usage: Mapping[str, Any]
    scheduled_for: datetime | None
    revision: Any


@dataclass(frozen=True)
class OccurrenceEntry:
    occurrence: Occurrence
    run: Run | None
    usage: Mapping[str, Any] | None
    run_deleted: bool


@dataclass(frozen=True)
class ScheduleDetail:
    schedule: Schedule
    panel: StatusPanel
    limits: RunLimits
    history: list[RevisionEntry]
    occurrences: list[OccurrenceEntry]
    events: list[EventEntry]
    pause_events: list[PauseEvent]
    notifications: list[NotificationAttempt]
    more_revisions: bool = False
    more_occurrences: bool = False
    more_events: bool = False


def schedule_detail(schedule: Schedule, tz: str) -> ScheduleDetail:
    """Everything the detail page shows: six queries (revisions, occurrences with their runs, events,
    pauses, requests, notices); seven when an event's run is older than the occurrences shown, eight
    when a long streak needs more events."""
    revisions = list(
        schedule.revisions.select_related("agent", "created_by", "request__requested_by").order_by("-number")[
            : REVISIONS_SHOWN + 1
        ]
    )
    occurrences = list(
        schedule.occurrences.select_related("run", "revision")
        .defer("run__prompt", "run__answer", "run__failure_message", "revision__prompt")
        .order_by("-scheduled_for", "-id")[: OCCURRENCES_SHOWN + 1]
    )
    events = list(_events_query(schedule.pk)[: EVENTS_SHOWN + 1])
    # The runs of the occurrences shown came with them; only an event's run beyond those is read.
    dimensions = {o.run.pk: o.run.failure_dimension for o in occurrences if o.run is not None}
    dimensions |= _failure_dimensions(schedule.owner_id, {e.run_id for e in events} - dimensions.keys())
    pause_events = pause_history(schedule)
    by_occurrence = {e.payload.get("occurrence_id"): e for e in events}
    history = revision_history(revisions)[:REVISIONS_SHOWN]
    requests = schedule_requests(schedule)
    return ScheduleDetail(
        schedule=schedule,
        panel=status_panel(schedule, tz, events=events, dimensions=dimensions, requests=requests),
        limits=schedule.revision.run_limits,
        history=history,
        occurrences=[_occurrence(o, by_occurrence.get(o.pk)) for o in occurrences[:OCCURRENCES_SHOWN]],
        events=[_event(e, dimensions) for e in events[:EVENTS_SHOWN]],
        pause_events=pause_events,
        notifications=notification_attempts(schedule.owner_id, schedule=schedule),
        more_revisions=bool(history) and history[-1].revision.number > 1,
        more_occurrences=len(occurrences) > OCCURRENCES_SHOWN,
        more_events=len(events) > EVENTS_SHOWN,
    )


NOTIFICATIONS_SHOWN = 20


def notification_attempts(owner_id: int, *, schedule: Schedule | None = None) -> list[NotificationAttempt]:
    """The newest pause-notification attempts of an owner, or of one schedule (one query)."""
    attempts = NotificationAttempt.objects.filter(owner_id=owner_id).select_related("schedule")
    if schedule is not None:
        attempts = attempts.filter(schedule=schedule)
    return list(attempts.order_by("-created_at", "-id")[:NOTIFICATIONS_SHOWN])


def pause_history(schedule: Schedule) -> list[PauseEvent]:
    """The newest pauses and resumes, with who made them (one query)."""
    return list(
        schedule.pause_events.select_related("actor").order_by("-created_at", "-id")[:PAUSE_EVENTS_SHOWN]
    )


def _occurrence(occurrence: Occurrence, event: AccountingEvent | None) -> OccurrenceEntry:
    run = occurrence.run
    ran = occurrence.outcome in (
        Occurrence.Outcome.COMPLETED,
        Occurrence.Outcome.FAILED,
        Occurrence.Outcome.CANCELLED,
    )
    usage: Mapping[str, Any] | None = None
    if run is not None:
        usage = run.usage()
    elif event is not None:
        usage = event.payload.get("usage")
    return OccurrenceEntry(occurrence, run, usage, run_deleted=ran and run is None)


def _event(event: AccountingEvent, dimensions: Mapping[int, str]) -> EventEntry:
    payload = event.payload
    scheduled = payload.get("scheduled_for")
    try:
        scheduled_for = datetime.fromisoformat(scheduled) if scheduled else None
    except ValueError:
        scheduled_for = None
    run_id = event.run_id or 0
    return EventEntry(
        event=event,
        late=event.event == AccountingEvent.Kind.LATE_USAGE,
        status=str(payload.get("status", "")),
        failure=Failure.from_payload(event.failure, dimensions.get(run_id, "")),
        run_exists=run_id in dimensions,
        usage=payload.get("usage") or {},
        scheduled_for=scheduled_for,
        revision=payload.get("revision"),
    )
