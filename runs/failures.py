"""The one vocabulary of run failures (SPEC §4): reasons, error classes, whether each is
transient, and the words every page, notification, admin filter and API enum uses for them.

Everything else derives from this module: `Run.failure_reason` and `Run.error_class` take their
choices from `Reason` and `ERROR_CLASS_CHOICES`, the admin filters and the API enums list the same
values, and the dashboard's sentences come from `Failure`. The runtime raises the exception
classes below; each one *is* its registry entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.db import models


class Reason(models.TextChoices):
    """The closed set of failure reasons, with the words shown for each."""

    BUDGET_EXHAUSTED = "budget_exhausted", "budget exhausted"
    SYNTHESIS_RESERVE_VIOLATION = "synthesis_reserve_violation", "synthesis reserve violated"
    PROVIDER_ERROR = "provider_error", "provider error"
    ADMISSION_DENIED = "admission_denied", "admission denied"
    TIMEOUT = "timeout", "timed out"
    WORKER_LOST = "worker_lost", "worker lost"
    INTERNAL_ERROR = "internal_error", "internal error"


@dataclass(frozen=True)
class Diagnostics:
    """Sanitized provider diagnostics: each kept only if it is a short identifier (SPEC §4)."""

    provider: str = ""
    provider_code: str = ""
    http_status: int | None = None
    provider_parameter: str = ""


class RunFailure(Exception):
    """Base of every failure a run can end with. `message` is for the owner's eyes only.

    Each subclass is one error class of the registry: its reason, whether it is transient
    (None: not a provider error), and what it means for the next run in plain words.
    """

    reason: ClassVar[Reason] = Reason.INTERNAL_ERROR
    error_class: ClassVar[str] = "InternalError"
    transient: ClassVar[bool | None] = None
    # What happened and whether it will pass, for a person who is not reading logs.
    headline: ClassVar[str] = "The run failed because of an internal error."
    outlook: ClassVar[str] = "It is logged for the operator; the next run may well succeed."

    def __init__(self, message: str, *, dimension: str = "", diagnostics: Diagnostics | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.dimension = dimension
        self.diagnostics = diagnostics or Diagnostics()


class BudgetExhausted(RunFailure):
    reason = Reason.BUDGET_EXHAUSTED
    error_class = "BudgetExhausted"
    headline = "The run used up its budget before it could answer."
    outlook = "The next run has the same budget; if runs keep costing more, a bigger budget is needed."


class SynthesisReserveViolation(RunFailure):
    reason = Reason.SYNTHESIS_RESERVE_VIOLATION
    error_class = "SynthesisReserveViolation"
    headline = "The model kept asking for tools after it was told to write its final answer."
    outlook = "It will likely happen again with the same prompt and model; change the prompt or the agent."


class ProviderTransientError(RunFailure):
    reason = Reason.PROVIDER_ERROR
    error_class = "ProviderTransientError"
    transient = True
    headline = "The AI provider failed for a while, and the retries within the run were used up."
    outlook = "Usually temporary: the next run will likely succeed."


class ProviderPermanentError(RunFailure):
    reason = Reason.PROVIDER_ERROR
    error_class = "ProviderPermanentError"
    transient = False
    headline = "The AI provider refused the request."
    outlook = "Retrying will not help until what the provider refused is fixed."


class AdmissionDenied(RunFailure):
    reason = Reason.ADMISSION_DENIED
    error_class = "AdmissionDenied"
    headline = "The run was not started: it did not fit under your spending ceiling."
    outlook = "It runs again once the day or month has room, or the ceiling is raised."


class RunTimeout(RunFailure):
    reason = Reason.TIMEOUT
    error_class = "RunTimeout"
    headline = "The run took longer than its time limit."
    outlook = "A slow provider or tool may pass; a prompt that needs more time will time out again."


class WorkerLost(RunFailure):
    reason = Reason.WORKER_LOST
    error_class = "WorkerLost"
    headline = "The worker running it stopped (a restart or a crash) before the run ended."
    outlook = "Usually a one-off: the next run will likely succeed."


class InternalError(RunFailure):
    reason = Reason.INTERNAL_ERROR
    error_class = "InternalError"


# The registry: every error class a run can record, in the order filters and docs list them.
ERROR_CLASSES: tuple[type[RunFailure], ...] = (
    BudgetExhausted,
    SynthesisReserveViolation,
    ProviderTransientError,
    ProviderPermanentError,
    AdmissionDenied,
    RunTimeout,
    WorkerLost,
    InternalError,
)
BY_ERROR_CLASS: Mapping[str, type[RunFailure]] = {cls.error_class: cls for cls in ERROR_CLASSES}
ERROR_CLASS_CHOICES: tuple[tuple[str, str], ...] = tuple(
    (cls.error_class, cls.error_class) for cls in ERROR_CLASSES
)


def reason_words(reason: str) -> str:
    try:
        return str(Reason(reason).label)
    except ValueError:  # a record written by a version with reasons this one does not know
        return reason.replace("_", " ")


@dataclass(frozen=True)
class Failure:
    """The content-free classification of a failed run, read from the run or from its
    `schedule.run_accounted` event, in the words every surface shows."""

    reason: str
    error_class: str
    transient: bool | None = None
    provider: str = ""
    provider_code: str = ""
    http_status: int | None = None
    provider_parameter: str = ""
    dimension: str = ""
    kind: type[RunFailure] = field(default=InternalError, compare=False)

    @classmethod
    def from_payload(cls, failure: Mapping[str, Any] | None, dimension: str = "") -> Failure | None:
        if not failure:
            return None
        error_class = str(failure.get("error_class", ""))
        kind = BY_ERROR_CLASS.get(error_class, InternalError)
        status = failure.get("http_status")
        return cls(
            reason=str(failure.get("reason", "")),
            error_class=error_class,
            transient=kind.transient,
            provider=str(failure.get("provider", "")),
            provider_code=str(failure.get("provider_code", "")),
            http_status=status if isinstance(status, int) and not isinstance(status, bool) else None,
            provider_parameter=str(failure.get("provider_parameter", "")),
            dimension=dimension,
            kind=kind,
        )

    @classmethod
    def from_run(cls, run: Any) -> Failure | None:
        """From a run's own failure columns; None unless it failed."""
        if run.status != "failed":
            return None
        source = run
        return cls(
            reason=source.failure_reason,
            error_class=source.error_class,
            transient=source.transient,
            provider=source.provider,
            provider_code=source.provider_code,
            http_status=source.http_status,
            provider_parameter=source.provider_parameter,
            dimension=source.failure_dimension,
            kind=BY_ERROR_CLASS.get(source.error_class, InternalError),
        )

    @property
    def reason_words(self) -> str:
        words = reason_words(self.reason)
        if self.dimension:
            suffix = " ceiling" if self.reason == Reason.ADMISSION_DENIED else ""
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


@dataclass
class Outcome:
    """How a run ended, as `finish_run` writes it."""

    status: str
    answer: str = ""
    failure: RunFailure | None = field(default=None)
