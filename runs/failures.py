"""The one vocabulary of run failures (docs/contract.md#providers-and-failures): reasons, error classes,
whether each is transient, and the words every page, notification, admin filter and API enum uses for
them.

Everything else derives from this module: `Run.failure_reason` and `Run.error_class` take their
choices from `Reason` and `ERROR_CLASS_CHOICES`, the admin filters and the API enums list the same
values, and the dashboard's sentences come from `Failure`. The runtime raises the exception
classes below; each one *is* its registry entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, ClassVar

from django.db import models

from accounting.formatting import money_text


class Reason(models.TextChoices):
    """The closed set of failure reasons, with the words shown for each."""

    BUDGET_EXHAUSTED = "budget_exhausted", "budget exhausted"
    SYNTHESIS_RESERVE_VIOLATION = "synthesis_reserve_violation", "synthesis reserve violated"
    PROVIDER_ERROR = "provider_error", "provider error"
    ADMISSION_DENIED = "admission_denied", "admission denied"
    TIMEOUT = "timeout", "timed out"
    WORKER_LOST = "worker_lost", "worker lost"
    INTERNAL_ERROR = "internal_error", "internal error"


# Quota and billing: a 429 naming one of these cannot succeed by waiting seconds, only once someone
# pays or the month turns. The one table of them (the classifier and the words below both read it):
# exact codes (LiteLLM's proxy says "budget_exceeded"), then the families of spend and usage caps
# (OpenAI's and others' "*_spend_limit_exceeded", Anthropic's tier cap "enforced_spend_limit_reached").
QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "billing_not_active",
        "credit_balance_exhausted",
        "billing_error",
        "billing_hard_limit_reached",
        "budget_exceeded",
    }
)
QUOTA_CODE_FAMILIES = re.compile(
    r"^(?:[a-z0-9_]+_)?(?:spend_limit_exceeded|spend_limit_reached|usage_limit_exceeded)$"
)


def is_quota_code(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    lowered = value.lower()
    return lowered in QUOTA_CODES or bool(QUOTA_CODE_FAMILIES.fullmatch(lowered))


# -- provider situations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Situation:
    """What a provider error means for a person, read from its structured fields (status, code),
    never from its message: what happened, whether it is likely to pass by itself, and when it
    will not, what must change first."""

    key: str
    what: str
    outlook: str
    passes: bool
    change: str = ""
    owner_fixes: bool = False  # the owner can make the change (edit the prompt) without an admin


OVERLOADED = Situation("overloaded", "The AI provider was overloaded", "usually temporary", passes=True)
RATE_LIMITED = Situation(
    "rate_limited", "The AI provider's rate limit was reached", "usually temporary", passes=True
)
SERVER_ERROR = Situation(
    "server_error", "The AI provider had a server error", "usually temporary", passes=True
)
NO_RESPONSE = Situation(
    "no_response",
    "The AI provider did not answer (the connection failed or timed out)",
    "usually temporary",
    passes=True,
)
UNAVAILABLE = Situation("unavailable", "The AI provider failed for a while", "usually temporary", passes=True)
QUOTA = Situation(
    "quota",
    "The provider account is out of quota or hit its spend limit",
    "it will fail again until the account is topped up or its limit raised",
    passes=False,
    change="the provider account is topped up or its spend limit raised",
)
# A permanent 429 whose recorded code names no quota: Anthropic's tier spend cap (named only in
# error.details, which is not a diagnostic), or a Retry-After longer than a run may wait (a daily
# token limit). Both lift only when the provider's limit resets or is raised.
LIMIT_REACHED = Situation(
    "limit_reached",
    "The AI provider's account hit a limit that will not lift within a run (a spend cap, or a rate "
    "limit that asked for a longer wait than a run can make)",
    "it will fail again until that limit resets or is raised",
    passes=False,
    change="the provider's limit resets or is raised",
)
AUTHENTICATION = Situation(
    "authentication",
    "The provider refused the agent's API key or what it may do",
    "it will fail again until the key or its permissions are fixed",
    passes=False,
    change="an admin fixes the agent's API key or its permissions",
)
NOT_FOUND = Situation(
    "not_found",
    "The provider does not know the agent's model or address",
    "it will fail again until the agent's model or base URL is fixed",
    passes=False,
    change="an admin fixes the agent's model or base URL",
)
TOO_LONG = Situation(
    "too_long",
    "The request was too long for the model",
    "it will fail again until the prompt is shorter or the agent uses a model with more context",
    passes=False,
    change="the prompt is shorter or the agent uses a model with more context",
    owner_fixes=True,
)
BAD_PARAMETER = Situation(
    "bad_parameter",
    "The provider refused the request as invalid",
    "it will fail again until the prompt or the agent's settings change",
    passes=False,
    change="the prompt or the agent's settings change",
    owner_fixes=True,
)
REFUSED = Situation(
    "refused",
    "The AI provider refused the request",
    "it will fail again until what it refused is fixed",
    passes=False,
    change="what the provider refused is fixed",
)
SITUATIONS: tuple[Situation, ...] = (
    OVERLOADED,
    RATE_LIMITED,
    SERVER_ERROR,
    NO_RESPONSE,
    UNAVAILABLE,
    QUOTA,
    LIMIT_REACHED,
    AUTHENTICATION,
    NOT_FOUND,
    TOO_LONG,
    BAD_PARAMETER,
    REFUSED,
)
_OVERLOADED_CODES = frozenset({"overloaded_error", "overloaded"})
_RATE_LIMIT_CODES = frozenset({"rate_limit_error", "rate_limit_exceeded"})
_SERVER_CODES = frozenset({"api_error", "server_error", "internal_error", "internal_server_error"})
_TOO_LONG_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "request_too_large", "exceed_context_size_error"}
)
_AUTHENTICATION_CODES = frozenset(
    {"authentication_error", "permission_error", "invalid_api_key", "auth_error"}
)
_NOT_FOUND_CODES = frozenset({"not_found_error", "model_not_found", "notfounderror"})


def provider_situation(*, transient: bool | None, http_status: int | None, provider_code: str) -> Situation:
    """The situation of a provider error from its recorded, structured diagnostics. It always
    agrees with the classification: a transient error's situation passes, a permanent one's
    does not (a 529 the provider marked `x-should-retry: false` is refused, not overloaded)."""
    situation = _situation(http_status, provider_code.lower(), transient=bool(transient))
    if situation.passes != bool(transient):
        return UNAVAILABLE if transient else REFUSED
    return situation


def _situation(http_status: int | None, code: str, *, transient: bool) -> Situation:
    if is_quota_code(code) or http_status == 402:
        return QUOTA
    if http_status is None:
        return NO_RESPONSE if transient else REFUSED
    if http_status == 529 or code in _OVERLOADED_CODES:
        return OVERLOADED
    if http_status == 429:
        return RATE_LIMITED if transient else LIMIT_REACHED
    if http_status in (401, 403) or code in _AUTHENTICATION_CODES:
        return AUTHENTICATION
    if http_status == 404 or code in _NOT_FOUND_CODES:
        return NOT_FOUND
    if http_status == 413 or code in _TOO_LONG_CODES:
        return TOO_LONG
    if http_status in (400, 422):
        return BAD_PARAMETER
    if code in _RATE_LIMIT_CODES:
        return RATE_LIMITED
    if http_status >= 500 or code in _SERVER_CODES:
        return SERVER_ERROR
    return UNAVAILABLE if transient else REFUSED


@dataclass(frozen=True)
class Diagnostics:
    """Sanitized provider diagnostics: each kept only if it is a short identifier
    (docs/contract.md#providers-and-failures)."""

    provider: str = ""
    provider_code: str = ""
    http_status: int | None = None
    provider_parameter: str = ""


# A failed run's own columns, each with the name it goes by on a RunFailure (its diagnostics'
# included) and on a Failure: finish_run writes them from the one, Failure.from_run reads the other.
RUN_COLUMNS = {
    "failure_reason": "reason",
    "error_class": "error_class",
    "transient": "transient",
    "failure_dimension": "dimension",
    "provider": "provider",
    "provider_code": "provider_code",
    "http_status": "http_status",
    "provider_parameter": "provider_parameter",
}


class RunFailure(Exception):
    """Base of every failure a run can end with. `message` is for the owner's eyes only.

    Each subclass is one error class of the registry: its reason, whether it is transient
    (None: not a provider error), and what it means for the next run in plain words.
    """

    reason: ClassVar[Reason] = Reason.INTERNAL_ERROR
    error_class: ClassVar[str] = "InternalError"
    label: ClassVar[str] = "internal error"  # the error class in words, for filters
    transient: ClassVar[bool | None] = None
    # What happened and whether it will pass, for a person who is not reading logs.
    headline: ClassVar[str] = "The run failed because of an internal error."
    outlook: ClassVar[str] = "It is logged for the operator; the next run may well succeed."

    def __init__(self, message: str, *, dimension: str = "", diagnostics: Diagnostics | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.dimension = dimension
        self.diagnostics = diagnostics or Diagnostics()

    def run_columns(self) -> dict[str, Any]:
        """What of it the run's own columns keep (RUN_COLUMNS): its classification, never the message."""
        values = {
            "reason": self.reason,
            "error_class": self.error_class,
            "transient": self.transient,
            "dimension": self.dimension,
            **asdict(self.diagnostics),
        }
        return {column: values[name] for column, name in RUN_COLUMNS.items()}


class BudgetExhausted(RunFailure):
    reason = Reason.BUDGET_EXHAUSTED
    error_class = "BudgetExhausted"
    label = "budget exhausted"
    headline = "The run used up its budget before it could answer."
    outlook = "The next run has the same budget; if runs keep costing more, a bigger budget is needed."


class SynthesisReserveViolation(RunFailure):
    reason = Reason.SYNTHESIS_RESERVE_VIOLATION
    error_class = "SynthesisReserveViolation"
    label = "reserve violated"
    headline = "The model kept asking for tools after it was told to write its final answer."
    outlook = "It will likely happen again with the same prompt and model; change the prompt or the agent."


class ProviderTransientError(RunFailure):
    reason = Reason.PROVIDER_ERROR
    error_class = "ProviderTransientError"
    label = "provider error, transient"
    transient = True
    headline = "The AI provider failed for a while, and the retries within the run were used up."
    outlook = "Usually temporary: the next run will likely succeed."


class ProviderPermanentError(RunFailure):
    reason = Reason.PROVIDER_ERROR
    error_class = "ProviderPermanentError"
    label = "provider error, permanent"
    transient = False
    headline = "The AI provider refused the request."
    outlook = "Retrying will not help until what the provider refused is fixed."


class AdmissionDenied(RunFailure):
    reason = Reason.ADMISSION_DENIED
    error_class = "AdmissionDenied"
    label = "admission denied"
    headline = "The run was not started: it did not fit under your spending ceiling."
    outlook = "It runs again once the day or month has room, or the ceiling is raised."


class RunTimeout(RunFailure):
    reason = Reason.TIMEOUT
    error_class = "RunTimeout"
    label = "timed out"
    headline = "The run took longer than its time limit."
    outlook = "A slow provider or tool may pass; a prompt that needs more time will time out again."


class WorkerLost(RunFailure):
    reason = Reason.WORKER_LOST
    error_class = "WorkerLost"
    label = "worker lost"
    headline = (
        "The worker running it stopped, or lost the database, before the run ended (a restart or a crash)."
    )
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
ERROR_CLASS_WORDS: tuple[tuple[str, str], ...] = tuple((cls.error_class, cls.label) for cls in ERROR_CLASSES)


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
    # The limit of the dimension a budget failure names, when the caller knows it (for the words).
    limit: int | Decimal | None = field(default=None, compare=False)

    @classmethod
    def from_payload(
        cls, failure: Mapping[str, Any] | None, dimension: str = "", limit: int | Decimal | None = None
    ) -> Failure | None:
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
            limit=limit,
        )

    @classmethod
    def from_run(cls, run: Any) -> Failure | None:
        """From a run's own failure columns (RUN_COLUMNS); None unless it failed."""
        if run.status != "failed":
            return None
        return cls(
            **{name: getattr(run, column) for column, name in RUN_COLUMNS.items()},
            kind=BY_ERROR_CLASS.get(run.error_class, InternalError),
            limit=_limit_of(run),
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
    def retry_words(self) -> str:
        """What the run did about it: "Transient: retried within the run, then given up"."""
        return {
            True: "Transient: retried within the run, then given up",
            False: "Permanent: not retried",
        }.get(self.transient, "Not a provider error")  # type: ignore[arg-type]

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

    # -- plain words first, identifiers after (what a person reads before the codes) ----------

    @property
    def situation(self) -> Situation | None:
        """What a provider error means; None for the other reasons."""
        if self.reason != Reason.PROVIDER_ERROR:
            return None
        return provider_situation(
            transient=self.transient, http_status=self.http_status, provider_code=self.provider_code
        )

    @property
    def what(self) -> str:
        """What happened, in words: "The AI provider was overloaded"."""
        situation = self.situation
        if situation is not None:
            return situation.what
        if self.reason == Reason.BUDGET_EXHAUSTED:
            return f"The run used {self._budget_words()} before answering"
        return self.kind.headline.rstrip(".")

    @property
    def outlook(self) -> str:
        """Whether it will pass: "usually temporary", "it will fail again until ..."."""
        situation = self.situation
        if situation is not None:
            return situation.outlook
        if self.reason == Reason.BUDGET_EXHAUSTED:
            return ""  # whether the next run fits depends on what runs cost: the schedule's record says
        outlook = self.kind.outlook.rstrip(".")
        return outlook[:1].lower() + outlook[1:]

    @property
    def headline(self) -> str:
        """ "The AI provider was overloaded — usually temporary." """
        return f"{self.what} — {self.outlook}." if self.outlook else f"{self.what}."

    @property
    def passes(self) -> bool | None:
        """Whether the next run is likely to succeed by itself: None when it depends on the runs
        (a budget, a ceiling, a slow prompt), which only the schedule's own record can tell."""
        situation = self.situation
        if situation is not None:
            return situation.passes
        if self.reason == Reason.SYNTHESIS_RESERVE_VIOLATION:
            return False
        if self.reason in (Reason.WORKER_LOST, Reason.INTERNAL_ERROR):
            return True
        return None

    @property
    def change_first(self) -> str:
        """What must change before a retry can succeed ("" when it may pass by itself)."""
        situation = self.situation
        if situation is not None:
            return situation.change
        if self.reason == Reason.SYNTHESIS_RESERVE_VIOLATION:
            return "the prompt or the agent changes"
        return ""

    @property
    def owner_fixes(self) -> bool:
        """Whether the owner can make that change themselves, by editing the prompt."""
        situation = self.situation
        if situation is not None:
            return situation.owner_fixes
        return self.reason == Reason.SYNTHESIS_RESERVE_VIOLATION

    @property
    def identifiers(self) -> str:
        """The quieter line: "provider error · transient · HTTP 529 · overloaded_error · simulated"."""
        parts = [
            self.reason_words,
            self.transience,
            f"HTTP {self.http_status}" if self.http_status else "",
            self.provider_code,
            f"parameter {self.provider_parameter}" if self.provider_parameter else "",
            self.provider,
        ]
        return " · ".join(p for p in parts if p)

    def _budget_words(self) -> str:
        limit = self.limit
        if self.dimension == "cost":
            return f"its whole {money_text(limit)} budget" if limit is not None else "its whole cost budget"
        if self.dimension in ("steps", "model_calls", "tool_calls"):
            noun = self.dimension.replace("_", " ")
            return f"all {limit} of its {noun}" if limit is not None else f"all of its {noun}"
        return "its whole budget"


def _limit_of(run: Any) -> int | Decimal | None:
    """The limit of the dimension a run's budget failure names, read from its own limits."""
    dimension = run.failure_dimension
    if run.failure_reason != Reason.BUDGET_EXHAUSTED or not dimension:
        return None
    value = (run.limits or {}).get(f"max_{dimension}")
    if value is None:
        return None
    return Decimal(str(value)) if dimension == "cost" else int(value)


@dataclass
class Outcome:
    """How a run ended, as `finish_run` writes it."""

    status: str
    answer: str = ""
    failure: RunFailure | None = field(default=None)
    answer_cut: bool = False  # the answer stopped at the agent's maximum output per call
