"""Failures and pauses in plain words: the classification of a failed run, what the failure
count means for the next run, and why a schedule is paused, in one sentence."""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accounting.models import AccountingEvent, owner_zone
from runs.models import Run
from schedules.models import PauseEvent, Schedule
from schedules.templatetags.dashboard import local_text

FAILURES_NAMED = 5  # a longer streak is summarized as "and N earlier"


def _zone(tz: str) -> zoneinfo.ZoneInfo:
    return owner_zone(tz)


# -- failure classification in words ------------------------------------------------------------

REASON_WORDS: dict[str, str] = {
    "budget_exhausted": "budget exhausted",
    "synthesis_reserve_violation": "synthesis reserve violated",
    "provider_error": "provider error",
    "admission_denied": "admission denied",
    "timeout": "timed out",
    "worker_lost": "worker lost",
    "internal_error": "internal error",
}
TRANSIENCE: dict[str, bool] = {"ProviderTransientError": True, "ProviderPermanentError": False}


@dataclass(frozen=True)
class Failure:
    """The content-free classification of a failed run, from the run or its accounting event."""

    reason: str
    error_class: str
    transient: bool | None = None
    provider: str = ""
    provider_code: str = ""
    http_status: int | None = None
    provider_parameter: str = ""
    dimension: str = ""

    @classmethod
    def from_payload(cls, failure: Mapping[str, Any] | None, dimension: str = "") -> Failure | None:
        if not failure:
            return None
        error_class = str(failure.get("error_class", ""))
        status = failure.get("http_status")
        return cls(
            reason=str(failure.get("reason", "")),
            error_class=error_class,
            transient=TRANSIENCE.get(error_class),
            provider=str(failure.get("provider", "")),
            provider_code=str(failure.get("provider_code", "")),
            http_status=int(status) if isinstance(status, int) else None,
            provider_parameter=str(failure.get("provider_parameter", "")),
            dimension=dimension,
        )

    @classmethod
    def from_run(cls, run: Run) -> Failure | None:
        if run.status != Run.Status.FAILED:
            return None
        return cls(
            reason=run.failure_reason,
            error_class=run.error_class,
            transient=run.transient,
            provider=run.provider,
            provider_code=run.provider_code,
            http_status=run.http_status,
            provider_parameter=run.provider_parameter,
            dimension=run.failure_dimension,
        )

    @property
    def reason_words(self) -> str:
        words = REASON_WORDS.get(self.reason, self.reason.replace("_", " "))
        if self.dimension:
            suffix = " ceiling" if self.reason == "admission_denied" else ""
            words += f" ({self.dimension.replace('_', ' ')}{suffix})"
        return words

    @property
    def transience(self) -> str:
        return {True: "transient", False: "permanent"}.get(self.transient, "")  # type: ignore[arg-type]

    @property
    def diagnostics(self) -> str:
        """ "anthropic 529 overloaded_error (param messages[1].content)"."""
        parts = [self.provider, str(self.http_status or ""), self.provider_code]
        text = " ".join(p for p in parts if p)
        if self.provider_parameter:
            text += f" (param {self.provider_parameter})"
        return text

    @property
    def long(self) -> str:
        """ "provider error · transient · anthropic 529 overloaded_error"."""
        return " · ".join(p for p in (self.reason_words, self.transience, self.diagnostics) if p)

    @property
    def short(self) -> str:
        """ "provider error 529 overloaded_error" / "budget exhausted (cost)"."""
        detail = " ".join(p for p in (str(self.http_status or ""), self.provider_code) if p)
        return f"{self.reason_words} {detail}".strip()


# -- the failure count, in plain words -----------------------------------------------------------


def count_sentence(count: int, limit: int, *, kept: bool) -> str:
    """What the failure count means for the next run. `kept`: said of a resume (before and after)."""
    verb = "stays at" if kept else "is"
    head = f"The failure count {verb} {count} of {limit}"
    if count == 0:
        return f"{head}: {limit} failed runs in a row pause the schedule."
    if count + 1 >= limit:
        again = "pauses again" if kept else "pauses"
        return f"{head}: if the next run fails, the schedule {again}; a completed run resets it."
    more = limit - count
    return f"{head}: {more} more failed runs in a row pause the schedule; a completed run resets it."


def _day(value: str | None, zone: zoneinfo.ZoneInfo) -> str:
    if not value:
        return ""
    try:
        return local_text(datetime.fromisoformat(value), zone, "day")
    except ValueError:
        return ""


def _actor_words(pause: PauseEvent, owner_id: int) -> str:
    if pause.actor_id is None:
        return "by the system"
    if pause.actor_id == owner_id:
        return "by you"
    name = pause.actor.get_username() if pause.actor else "an admin"
    return f"by an admin ({name})"


def pause_explanation(
    schedule: Schedule,
    pause: PauseEvent,
    events: Sequence[AccountingEvent],
    dimensions: Mapping[int, str],
    tz: str,
) -> str:
    """Why the schedule is paused, in one sentence.

    "Paused on 3 Sep at 09:02 EEST after 2 consecutive failed runs: budget exhausted (cost) on
    2 Sep, provider error 529 overloaded_error on 3 Sep." `events` are the schedule's newest
    accounting events, newest first; the failures counted are the newest ones at the pause.
    """
    zone = _zone(tz)
    local = pause.created_at.astimezone(zone)
    when = f"Paused on {local_text(local, zone, 'day')} at {local_text(local, zone, 'time')}"
    if pause.reason == PauseEvent.Reason.OWNER:
        return f"{when} {_actor_words(pause, schedule.owner_id)}."
    if pause.reason == PauseEvent.Reason.ADMIN:
        return f"{when} {_actor_words(pause, schedule.owner_id)}."
    if pause.reason == PauseEvent.Reason.INVALID_DEFINITION:
        detail = f": {pause.detail}" if pause.detail else ""
        return f"{when} by the system, because the schedule could not be run as defined{detail}."
    count = pause.failures_at_event
    counted = [e for e in events if e.created_at <= pause.created_at and e.failure][:count]
    named = list(reversed(counted[:FAILURES_NAMED]))
    parts = []
    for event in named:
        failure = Failure.from_payload(event.failure, dimensions.get(event.run_id or 0, ""))
        assert failure is not None
        day = _day(event.payload.get("scheduled_for"), zone)
        parts.append(f"{failure.short} on {day}" if day else failure.short)
    earlier = count - len(named)
    runs = "run" if count == 1 else "runs"
    streak = f"after {count} consecutive failed {runs}" if count > 1 else "after 1 failed run"
    listed = ", ".join(parts)
    if earlier > 0 and parts:
        listed = f"{listed} (and {earlier} earlier)"
    return f"{when} {streak}: {listed}." if listed else f"{when} {streak}."
