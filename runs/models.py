"""Agents, conversations, runs and their transcripts (docs/contract.md#vocabulary, #the-run-loop,
#providers-and-failures)."""

from __future__ import annotations

import fnmatch
import re
from decimal import Decimal
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from accounting.models import AppendOnlyModel, MoneyField, OwnedQuerySet
from config import env
from runs import outbound, pricing
from runs.failures import ERROR_CLASS_CHOICES, Reason
from runs.limits import DIMENSIONS, Dimension, RunLimits

CREDENTIAL_PERMISSION = "runs.change_agent_credentials"
# An agent's maximum output per call when none is given: room for a briefing of a thousand words or
# so, with some reasoning. The dollars left may lower a call's cap below it, never raise it.
DEFAULT_MAX_OUTPUT_TOKENS = 2048
MAX_OUTPUT_TOKENS_LIMIT = 200_000
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


def api_key_setting_problem(name: str) -> str:
    """Why an agent may not read its API key from this environment variable ("" when it may).

    The value of the variable is sent as a bearer key to the agent's base URL, so a name such as
    DATABASE_URL or SECRET_KEY would hand that secret to whoever controls the URL: only names
    matching the operator's pattern, and never one the settings themselves read."""
    if not name:
        return ""
    pattern = settings.PROVIDER_API_KEY_PATTERN
    if not _ENV_NAME.fullmatch(name):
        return "must be an environment variable name in capitals, such as OPENAI_API_KEY"
    if not fnmatch.fnmatchcase(name, pattern):
        return f"must match {pattern} (the operator's PROVIDER_API_KEY_PATTERN)"
    if name in env.READ:
        return "names a variable the server's own settings read; it cannot hold an agent's key"
    return ""


def base_url_problem(url: str) -> str:
    """Why an agent may not call this base URL ("" when it may): it must parse as it will be
    sent; in production it must be https and public, unless its host is on PROVIDER_ALLOWED_HOSTS
    (a self-hosted model on a private network)."""
    if not url:
        return ""
    try:
        parsed = httpx.URL(outbound.normalize_url(url, field="base_url"))
    except outbound.UnsafeURL as exc:
        return str(exc).removeprefix("base_url ")
    allowed = parsed.host in settings.PROVIDER_ALLOWED_HOSTS
    if settings.PRODUCTION and parsed.scheme != "https" and not allowed:
        return "must use https:// (or name a host on PROVIDER_ALLOWED_HOSTS)"
    if not settings.ALLOW_PRIVATE_ADDRESSES:
        problem = outbound.host_problem(parsed.host, allowed_hosts=settings.PROVIDER_ALLOWED_HOSTS)
        if problem:
            return f"{problem} (list the host on PROVIDER_ALLOWED_HOSTS if that is intended)"
    return ""


def validate_api_key_setting(value: str) -> None:
    if reason := api_key_setting_problem(value):
        raise ValidationError(f"api_key_setting {reason}")


def validate_base_url(value: str) -> None:
    if reason := base_url_problem(value):
        raise ValidationError(f"base_url {reason}")


class Agent(models.Model):
    """A configured assistant. The API key is never stored: `api_key_setting` names the
    environment variable that holds it. Its credentials (provider, base URL, key setting) are a
    power of their own: changing them needs CREDENTIAL_PERMISSION and is recorded in
    AgentCredentialChange."""

    CREDENTIAL_FIELDS = ("provider", "base_url", "api_key_setting")

    class Provider(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible Chat Completions"
        ANTHROPIC = "anthropic", "Anthropic Messages"
        SIMULATED = "simulated", "Simulated provider"

    name = models.SlugField(max_length=64, unique=True)
    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=128)
    base_url = models.URLField(
        blank=True,
        validators=[validate_base_url],
        help_text="Provider endpoint. Blank: the provider's default (simulated: in-process).",
    )
    api_key_setting = models.CharField(
        max_length=64,
        blank=True,
        validators=[validate_api_key_setting],
        help_text="Name of the environment variable holding the API key, e.g. OPENAI_API_KEY.",
    )
    system_prompt = models.TextField(blank=True)
    tools = models.JSONField(default=list, blank=True, help_text='Enabled tool names, e.g. ["clock.now"].')
    # Its own prices, USD per million tokens by kind (runs.pricing.KINDS), as strings; empty: the price
    # catalogue's for its provider and model (docs/contract.md#prices).
    prices = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            'Its own prices in USD per million tokens by kind, e.g. {"input": "3.00", "output": "15.00"}; '
            "empty: the price catalogue's."
        ),
    )
    default_limits = models.JSONField(help_text="RunLimits used when a caller gives none.")
    max_output_tokens = models.PositiveIntegerField(
        default=DEFAULT_MAX_OUTPUT_TOKENS,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_OUTPUT_TOKENS_LIMIT)],
        help_text=(
            "Most tokens one model call may write (reasoning included). A call is capped lower when "
            "the run's dollars left pay for less, never higher."
        ),
    )
    cost_limit = MoneyField(
        null=True, blank=True, help_text="Finite cost limit per run, USD; blank = no finite limit."
    )
    is_active = models.BooleanField(default=True, help_text="Retire an agent instead of deleting it.")
    # What a message in a conversation sends of the conversation's earlier exchanges (runs.history):
    # the newest ones, at most this many and about this many tokens; older ones are dropped.
    history_turns = models.PositiveIntegerField(
        default=20, help_text="Earlier exchanges of a conversation sent with each message, newest first."
    )
    history_tokens = models.PositiveIntegerField(
        default=12_000,
        help_text="Largest size of those earlier exchanges, in estimated tokens (4 characters each).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [
            ("change_agent_credentials", "Can change an agent's provider, base URL and API key setting")
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(cost_limit__isnull=True) | models.Q(cost_limit__gt=0),
                name="agent_cost_limit_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def limits(self) -> RunLimits:
        return RunLimits.from_json(self.default_limits)

    def price_sheet(self) -> pricing.PriceSheet:
        """The prices its calls are charged at: its own, else the catalogue's (pricing.NoPrice)."""
        return pricing.sheet_for(self.provider, self.base_url, self.model, self.prices)

    def price_problem(self) -> str:
        """Why this agent cannot be saved with its prices ("" when it can): its own prices must be
        prices of kinds its provider bills, and an active agent must have a price for its model,
        its own or the catalogue's (never a cost of 0)."""
        try:
            own = pricing.parse_prices(self.provider, self.prices)
        except ValueError as exc:
            return str(exc)
        if self.is_active and not own:
            try:
                self.price_sheet()
            except pricing.NoPrice as exc:
                return f"{exc.message}, or retire the agent"
        return ""


class AgentCredentialChange(AppendOnlyModel):
    """Who changed an agent's provider, base URL or API key setting, when, from what to what.
    Never the key itself: only the name of the variable that holds it."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="credential_changes")
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_at = models.DateTimeField()
    field = models.CharField(max_length=32)
    old_value = models.CharField(max_length=500, blank=True)
    new_value = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.field}: {self.old_value!r} → {self.new_value!r}"


class ConversationAgentChange(AppendOnlyModel):
    """Who switched a conversation to another agent (other tools, other prices, another
    provider), when, from which to which. A credentials-level power (CREDENTIAL_PERMISSION).
    Content-free, and kept by id: it outlives the conversation, as the ledger does."""

    conversation_id = models.BigIntegerField(db_index=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_at = models.DateTimeField()
    old_agent = models.CharField(max_length=64, blank=True)
    new_agent = models.CharField(max_length=64)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"conversation {self.conversation_id}: {self.old_agent or '-'} → {self.new_agent}"


class ConversationQuerySet(OwnedQuerySet["Conversation"]):
    """Conversations, by their owner (owned_by)."""


class Conversation(models.Model):
    """A chat session. Scheduled occurrences each get a new one, named in `metadata`
    (`schedule_id`, `occurrence_id`, `scheduled_for`). One the owner started has its `agent`."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # When its newest message was sent (or it was created): the conversations list's order.
    last_activity_at = models.DateTimeField(default=timezone.now)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-last_activity_at", "-id"], name="conversation_owner_activity")
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def schedule_id(self) -> int | None:
        value = self.metadata.get("schedule_id")
        return int(value) if value is not None else None

    @property
    def is_scheduled(self) -> bool:
        """An occurrence's own conversation: the owner reads its answer there."""
        return "occurrence_id" in self.metadata


class RunQuerySet(OwnedQuerySet["Run"]):
    def in_flight(self) -> RunQuerySet:
        return self.filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING])


class Run(models.Model):
    class Kind(models.TextChoices):
        INTERACTIVE = "interactive"
        DELEGATED = "delegated"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FailureReason = Reason  # the registry's (runs.failures)

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    # No index of their own on owner, conversation, parent or status: the composite indexes of Meta
    # lead with each of them and serve the same lookups, and every index costs each run's claim and
    # end (they change its status) a write.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INTERACTIVE)
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children", db_index=False
    )
    prompt = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    limits = models.JSONField()

    steps = models.PositiveIntegerField(default=0)
    model_calls = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    cost = MoneyField(default=Decimal(0))

    synthesis_dimension = models.CharField(max_length=16, blank=True)
    synthesis_step = models.PositiveIntegerField(null=True, blank=True)
    answer = models.TextField(blank=True)
    # The answer stopped at the agent's maximum output per call (finish_reason "length"): it may end
    # mid-sentence. (Stopped by the dollars left instead, the run fails budget_exhausted.)
    answer_cut = models.BooleanField(default=False, db_default=False)
    # While a model call is on the wire: its bound (`id`, the ledger fields of its worst case), so
    # that if the worker is lost mid-call the reaper charges what the provider may have billed; and
    # the text it has streamed so far, written at most once a second (runs.watch). Both are cleared
    # when the call's step is recorded.
    open_call = models.JSONField(null=True, blank=True)
    partial_text = models.TextField(blank=True, default="", db_default="")

    failure_reason = models.CharField(max_length=32, choices=FailureReason.choices, blank=True)
    error_class = models.CharField(max_length=64, choices=ERROR_CLASS_CHOICES, blank=True)
    failure_dimension = models.CharField(max_length=16, blank=True)
    transient = models.BooleanField(null=True, blank=True)
    provider = models.CharField(max_length=32, blank=True)
    provider_code = models.CharField(max_length=64, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    provider_parameter = models.CharField(max_length=64, blank=True)
    failure_message = models.TextField(blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The worker executing the run proves it is alive here; `attempt` names that execution so a
    # late finisher of an older attempt cannot overwrite what replaced it.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempt = models.UUIDField(null=True, blank=True, db_index=True)
    # Which worker process claimed it ("host:pid"): where it is in flight (runs.inflight).
    worker = models.CharField(max_length=100, blank=True, default="", db_default="")
    # What its requests carry of the conversation's earlier exchanges (runs.history), chosen when
    # it is queued: how many, and whether older ones were left out by the agent's bound.
    history_sent = models.PositiveIntegerField(null=True, blank=True)
    history_omitted = models.BooleanField(default=False)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
            # The claim's fair order (runs.inflight): each owner's queued runs, oldest first.
            models.Index(
                fields=["owner", "id"],
                name="run_queued_by_owner",
                condition=models.Q(status="queued", parent__isnull=True),
            ),
            models.Index(fields=["owner", "-created_at"], name="run_owner_newest"),
            # A conversation's newest completed exchanges, read newest first and only as many as
            # are sent (runs.history), whatever the length of the conversation.
            models.Index(fields=["conversation", "kind", "status", "-id"], name="run_conversation_history"),
            # The admin's runs of one worker (host:pid), newest first: the filter reads only that
            # worker's rows, however many runs the others have.
            models.Index(fields=["worker", "-id"], name="run_worker_newest"),
            # The admin's runs of one provider in one status (failed runs of anthropic, say), newest
            # first: filter, order and page read one stretch of this index, however many runs match.
            models.Index(fields=["provider", "status", "-id"], name="run_provider_status_newest"),
            # A run's delegated children; most runs have no parent, and are not in it.
            models.Index(fields=["parent"], condition=models.Q(parent__isnull=False), name="run_children"),
        ]
        constraints = [
            # One message at a time: a conversation has at most one interactive run in flight.
            models.UniqueConstraint(
                fields=["conversation"],
                condition=models.Q(kind="interactive", status__in=["queued", "running"]),
                name="run_one_in_flight_per_conversation",
            ),
            models.CheckConstraint(condition=models.Q(cost__gte=0), name="run_cost_non_negative"),
            models.CheckConstraint(
                condition=models.Q(kind="delegated", parent__isnull=False)
                | models.Q(kind="interactive", parent__isnull=True),
                name="run_delegated_has_parent",
            ),
            models.CheckConstraint(
                condition=models.Q(status="failed", failure_reason__gt="")
                | (~models.Q(status="failed") & models.Q(failure_reason="")),
                name="run_failure_reason_iff_failed",
            ),
            models.CheckConstraint(
                condition=models.Q(http_status__isnull=True)
                | models.Q(http_status__gte=100, http_status__lte=599),
                name="run_http_status_range",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def run_limits(self) -> RunLimits:
        return RunLimits.from_json(self.limits)

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    def used(self, dimension: Dimension) -> int | Decimal:
        return getattr(self, dimension)  # type: ignore[no-any-return]

    def usage(self) -> dict[str, Any]:
        return {d: self.used(d) for d in DIMENSIONS}

    def failure_summary(self) -> dict[str, Any] | None:
        """The content-free classification: what `schedule.run_accounted` carries
        (docs/contract.md#schedules)."""
        if self.status != self.Status.FAILED:
            return None
        failure: dict[str, Any] = {"reason": self.failure_reason, "error_class": self.error_class}
        for key in ("provider", "provider_code", "provider_parameter"):
            if getattr(self, key):
                failure[key] = getattr(self, key)
        if self.http_status is not None:
            failure["http_status"] = self.http_status
        return failure


class TranscriptEntry(models.Model):
    """One message of a run: the prompt, each model response, each tool result. The volatile synthesis
    instruction is never one of these (docs/decisions/0001, point 2)."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    # Its lookups go through the unique (run, seq) index: no index of its own.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="transcript", db_index=False)
    seq = models.PositiveIntegerField()
    step = models.PositiveIntegerField(default=0)
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=128, blank=True)
    tool_name = models.CharField(max_length=64, blank=True)
    is_error = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="transcript_run_seq_unique")]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq} of run {self.run_id}"
