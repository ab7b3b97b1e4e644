"""The closed set of run failures (SPEC §4) as exceptions the runtime raises and records."""

from __future__ import annotations

from dataclasses import dataclass, field

from runs.models import Run

Reason = Run.FailureReason


@dataclass(frozen=True)
class Diagnostics:
    """Sanitized provider diagnostics: each kept only if it is a short identifier (SPEC §4)."""

    provider: str = ""
    provider_code: str = ""
    http_status: int | None = None
    provider_parameter: str = ""


class RunFailure(Exception):
    """Base of every failure a run can end with. `message` is for the owner's eyes only."""

    reason: Reason = Reason.INTERNAL_ERROR
    error_class = "InternalError"
    transient: bool | None = None

    def __init__(self, message: str, *, dimension: str = "", diagnostics: Diagnostics | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.dimension = dimension
        self.diagnostics = diagnostics or Diagnostics()


class BudgetExhausted(RunFailure):
    reason = Reason.BUDGET_EXHAUSTED
    error_class = "BudgetExhausted"


class SynthesisReserveViolation(RunFailure):
    reason = Reason.SYNTHESIS_RESERVE_VIOLATION
    error_class = "SynthesisReserveViolation"


class ProviderTransientError(RunFailure):
    reason = Reason.PROVIDER_ERROR
    error_class = "ProviderTransientError"
    transient = True


class ProviderPermanentError(RunFailure):
    reason = Reason.PROVIDER_ERROR
    error_class = "ProviderPermanentError"
    transient = False


class AdmissionDenied(RunFailure):
    reason = Reason.ADMISSION_DENIED
    error_class = "AdmissionDenied"


class RunTimeout(RunFailure):
    reason = Reason.TIMEOUT
    error_class = "RunTimeout"


class WorkerLost(RunFailure):
    reason = Reason.WORKER_LOST
    error_class = "WorkerLost"


class InternalError(RunFailure):
    reason = Reason.INTERNAL_ERROR
    error_class = "InternalError"


@dataclass
class Outcome:
    """How a run ended, as `finish_run` writes it."""

    status: str
    answer: str = ""
    failure: RunFailure | None = field(default=None)
