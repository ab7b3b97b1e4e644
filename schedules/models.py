"""Schedules, their immutable revisions, occurrences, the pause/resume audit, and API tokens."""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from accounting.models import AccountingEvent, AppendOnlyModel, BudgetAlert, MoneyField, OwnedQuerySet
from accounting.money import format_money
from runs.limits import RunLimits
from runs.models import Agent, Run
from schedules import recurrence


class ScheduleQuerySet(OwnedQuerySet["Schedule"]):
    def due(self, now: datetime) -> ScheduleQuerySet:
        return self.filter(status=Schedule.Status.ACTIVE, next_occurrence_at__lte=now)


class Schedule(models.Model):
    class Kind(models.TextChoices):
        ONE_TIME = "one_time", "One-time"
        RECURRING = "recurring", "Recurring"

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        COMPLETED = "completed"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="schedules")
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    consecutive_failures = models.PositiveIntegerField(default=0)
    next_occurrence_at = models.DateTimeField(null=True, blank=True)
    # Pointers to append-only rows, so the list page reads each with one join: the revision in
    # force, the pause in force (null unless paused) and the newest accounted run. DO_NOTHING
    # because those rows only ever go away together with this schedule, and the (deferred)
    # foreign keys are checked at commit, when both are gone.
    current_revision = models.ForeignKey(
        "ScheduleRevision", on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+"
    )
    pause = models.ForeignKey(
        "PauseEvent", on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+"
    )
    last_event = models.ForeignKey(
        AccountingEvent, on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Tell the owner when one of its runs completes: None follows the owner's setting
    # (NotificationSettings.completion_*), True or False overrides it for this schedule.
    completion_notices = models.BooleanField(null=True, blank=True)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        ordering = ["title", "id"]
        indexes = [
            # The tick's claim: due active schedules in slot order, the id breaking ties (cron slots
            # tie on the minute), so each batch reads its rows off the index without sorting.
            models.Index(
                fields=["next_occurrence_at", "id"],
                condition=models.Q(status="active"),
                name="schedule_due_in_order",
            ),
            # The list: one owner's schedules by status, then title and id (its keyset order).
            models.Index(fields=["owner", "status", "title", "id"], name="schedule_owner_list"),
            # The admin's changelist: every owner's schedules in this Meta.ordering, a page read
            # off the index instead of sorting the whole table joined to its revisions.
            models.Index(fields=["title", "id"], name="schedule_title_order"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(status="paused") | models.Q(pause__isnull=False),
                name="schedule_paused_has_pause_record",
            ),
        ]
        permissions = [("pin_revision", "Can pin an explicit schedule revision (limits and failure limit)")]

    def __str__(self) -> str:
        return self.title

    @property
    def revision(self) -> ScheduleRevision:
        assert self.current_revision is not None
        return self.current_revision

    def next_slot_after(self, moment: datetime) -> datetime | None:
        """The next slot strictly after `moment`; a one-time schedule's only slot, if still ahead."""
        revision = self.revision
        if self.kind == self.Kind.ONE_TIME:
            return revision.run_at if revision.run_at and revision.run_at > moment else None
        cron = recurrence.parse_cron(revision.cron)
        return recurrence.next_slot(cron, recurrence.parse_timezone(revision.timezone), moment)


class ScheduleRevision(AppendOnlyModel):
    """An immutable, numbered definition. Existing revisions keep their pinned values forever."""

    class Path(models.TextChoices):
        CREATE = "schedule.create"
        UPDATE = "schedule.update"
        EXPLICIT = "explicit"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    path = models.CharField(max_length=32, choices=Path.choices)
    via = models.CharField(
        max_length=32, help_text="Where the change came from: chat, dashboard, admin, api, demo."
    )
    reason = models.TextField(blank=True)
    title = models.CharField(max_length=200)
    prompt = models.TextField()
    cron = models.CharField(max_length=120, blank=True)
    timezone = models.CharField(max_length=64)
    run_at = models.DateTimeField(null=True, blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    limits = models.JSONField()
    max_consecutive_failures = models.PositiveIntegerField()
    # What the schedule may spend in the owner's calendar month, USD; null: no cap. Pinned like a
    # limit, beside RunLimits (docs/contract.md#monthly-cap-per-schedule).
    monthly_cap = MoneyField(null=True, blank=True)
    # A revision written in chat names the conversation and run whose tool call wrote it. Plain
    # ids, not foreign keys: deleting the conversation must not rewrite an append-only revision.
    conversation_id = models.BigIntegerField(
        null=True, blank=True, db_index=True, help_text="The conversation it was written in (chat)."
    )
    run_id = models.BigIntegerField(null=True, blank=True, help_text="The run whose tool call wrote it.")
    # The owner's request an explicit revision answers, if any. DO_NOTHING: both rows only ever
    # go away together with their schedule (the foreign key is checked at commit).
    request = models.ForeignKey(
        "RevisionRequest", on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["schedule", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "number"], name="revision_number_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="revision_number_positive"),
            models.CheckConstraint(
                condition=models.Q(max_consecutive_failures__gte=1), name="revision_failure_limit_positive"
            ),
            models.CheckConstraint(
                condition=(models.Q(cron="") & models.Q(run_at__isnull=False))
                | (~models.Q(cron="") & models.Q(run_at__isnull=True)),
                name="revision_cron_xor_run_at",
            ),
            models.CheckConstraint(
                condition=~models.Q(path="explicit") | ~models.Q(reason=""),
                name="revision_explicit_has_reason",
            ),
            models.CheckConstraint(
                condition=models.Q(request__isnull=True) | models.Q(path="explicit"),
                name="revision_request_only_explicit",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} revision {self.number}"

    @property
    def run_limits(self) -> RunLimits:
        return RunLimits.from_json(self.limits)

    @property
    def cadence(self) -> str:
        if self.run_at:
            local = self.run_at.astimezone(zoneinfo.ZoneInfo(self.timezone))
            return f"Once, {local:%d %b %Y at %H:%M}, {self.timezone}"
        return recurrence.describe(self.cron, self.timezone)


class OccurrenceQuerySet(OwnedQuerySet["Occurrence"]):
    owner_field = "schedule__owner_id"


class Occurrence(models.Model):
    """One due slot of a schedule. Unique per (schedule, scheduled_for): no slot runs twice."""

    class Outcome(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        MISSED = "missed"
        SKIPPED = "skipped"

    class SkipReason(models.TextChoices):
        OVERLAP = "overlap", "the previous run was still in flight"
        MONTHLY_CAP = "monthly_cap", "it would have crossed the schedule's monthly cap"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="occurrences")
    scheduled_for = models.DateTimeField()
    revision = models.ForeignKey(ScheduleRevision, on_delete=models.CASCADE, related_name="occurrences")
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    skip_reason = models.CharField(max_length=16, choices=SkipReason.choices, blank=True, db_default="")
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # Set by the worker that claims the occurrence; its run carries the same attempt id.
    attempt = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = OccurrenceQuerySet.as_manager()

    class Meta:
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "scheduled_for"], name="occurrence_slot_unique"),
        ]
        indexes = [
            models.Index(fields=["schedule", "-scheduled_for"], name="occurrence_schedule_newest"),
            models.Index(
                fields=["outcome"],
                name="occurrence_in_flight",
                condition=models.Q(outcome__in=["pending", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.scheduled_for:%Y-%m-%d %H:%M} ({self.outcome})"


class PauseEvent(AppendOnlyModel):
    """The audit of every status change: pause, resume and completion. Who (null = the system),
    when, why, and the failure count at that moment.

    A pause the schedule made itself writes its notice (a Notice row, the one outbox) in the
    same transaction.
    """

    class Action(models.TextChoices):
        PAUSE = "pause"
        RESUME = "resume"
        COMPLETE = "complete"

    class Reason(models.TextChoices):
        FAILURE_LIMIT = "failure_limit", "failure limit"
        OWNER = "owner", "by owner"
        ADMIN = "admin", "by admin"
        INVALID_DEFINITION = "invalid_definition", "invalid definition"

    # Pauses the schedule made itself: the owner is told about these.
    SELF_PAUSES = (Reason.FAILURE_LIMIT, Reason.INVALID_DEFINITION)

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="pause_events")
    action = models.CharField(max_length=8, choices=Action.choices)
    reason = models.CharField(max_length=32, choices=Reason.choices, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run_id = models.BigIntegerField(
        null=True, blank=True, help_text="The run that tripped a failure-limit pause."
    )
    failures_at_event = models.PositiveIntegerField()
    failure_limit = models.PositiveIntegerField()
    detail = models.CharField(max_length=300, blank=True, help_text="Sanitized diagnostic, never content.")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(action__in=["resume", "complete"], reason="")
                | models.Q(action="pause", reason__gt=""),
                name="pause_event_reason_iff_pause",
            ),
        ]

    def __str__(self) -> str:
        reason = f" ({self.reason})" if self.reason else ""
        return f"{self.action}{reason} of schedule {self.schedule_id}"

    @property
    def needs_notice(self) -> bool:
        return self.action == self.Action.PAUSE and self.reason in self.SELF_PAUSES


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only the SHA-256 of the secret is stored; the secret is
    shown once when the token is created."""

    class Scope(models.TextChoices):
        READ = "read"
        WRITE = "write"
        PIN_REVISION = "pin_revision"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="The first characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


def revision_snapshot(revision: ScheduleRevision) -> dict[str, Any]:
    """The comparable fields of a revision, for diffs on the dashboard and the pin page."""
    return {
        "title": revision.title,
        "prompt": revision.prompt,
        "cadence": revision.cadence,
        "agent": revision.agent.name,
        "max_consecutive_failures": revision.max_consecutive_failures,
        "monthly_cap": format_money(revision.monthly_cap) if revision.monthly_cap is not None else "none",
        **revision.limits,
    }


class NotificationSettings(models.Model):
    """How an owner hears that a schedule paused itself (email, a signed webhook, or both)."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    email_enabled = models.BooleanField(default=True)
    webhook_enabled = models.BooleanField(default=False)
    webhook_url = models.URLField(max_length=500, blank=True)
    # Signs each webhook body (HMAC-SHA256); shown to the owner once, when it is rotated.
    webhook_secret = models.CharField(max_length=64, blank=True)
    webhook_failures = models.PositiveIntegerField(default=0, help_text="Consecutive permanent failures.")
    webhook_disabled_at = models.DateTimeField(null=True, blank=True)
    webhook_disabled_reason = models.CharField(max_length=300, blank=True)
    # Completion notices (schedules.notices.completed): off by default, per channel; a schedule may
    # override whether it sends them. The webhook carries the answer only with the content opt-in.
    completion_email = models.BooleanField(default=False)
    completion_webhook = models.BooleanField(default=False)
    webhook_content = models.BooleanField(default=False)
    # Completion notices only when the answer differs from the schedule's previous completed run's.
    completion_only_changed = models.BooleanField(default=False, db_default=False)
    # A schedule the assistant proposes in chat waits for the owner's confirmation (schedules.proposals).
    confirm_chat_schedules = models.BooleanField(default=True, db_default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "notification settings"

    def __str__(self) -> str:
        return f"Notifications of {self.owner}"

    @property
    def webhook_active(self) -> bool:
        return self.webhook_enabled and bool(self.webhook_url) and self.webhook_disabled_at is None


class NotificationAttempt(AppendOnlyModel):
    """One delivery attempt of a notice on one channel (content-free); none for a test notice."""

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    class Outcome(models.TextChoices):
        DELIVERED = "delivered"
        RETRYING = "retrying", "failed, will retry"
        FAILED = "failed"
        SKIPPED = "skipped"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, null=True, blank=True, related_name="notification_attempts"
    )
    pause_event = models.ForeignKey(
        PauseEvent, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    notice = models.ForeignKey(
        "Notice", on_delete=models.CASCADE, null=True, blank=True, related_name="attempts"
    )
    # Set on the notice of a decided revision request (the owner is told it was pinned or declined).
    revision_request = models.ForeignKey(
        "RevisionRequest", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    attempt = models.PositiveSmallIntegerField(default=1)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    detail = models.CharField(max_length=300, blank=True)
    is_test = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["schedule", "-created_at"], name="notify_schedule_newest")]

    def __str__(self) -> str:
        return f"{self.channel} {self.outcome} ({self.created_at:%Y-%m-%d %H:%M})"


class Notice(models.Model):
    """The one outbox of what the owner is told (schedules.notices): a row per notice, written in
    the transaction of what it tells (a self-pause, a decided request, a completed run the owner
    asked to hear about), so a rolled-back change tells nothing and a worker that dies after the
    commit loses nothing. The minute `notify` task claims each row with a conditional update on
    `notify_claimed_at`, sends it once per channel, and sets `notified_at`; those two columns are
    the only ones ever updated."""

    class Kind(models.TextChoices):
        PAUSED = "paused"
        DECIDED = "decided"
        COMPLETED = "completed"
        BUDGET = "budget"
        MONTHLY_CAP = "monthly_cap"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    # Every kind but a budget alert is about one schedule.
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    # What it is about: one of these, by kind.
    pause_event = models.ForeignKey(
        PauseEvent, on_delete=models.CASCADE, null=True, blank=True, related_name="notices"
    )
    revision_request = models.ForeignKey(
        "RevisionRequest", on_delete=models.CASCADE, null=True, blank=True, related_name="notices"
    )
    occurrence = models.ForeignKey(
        Occurrence, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    run_id = models.BigIntegerField(
        null=True, blank=True, help_text="The completed run (its conversation may be deleted since)."
    )
    # A budget notice: the highest threshold it names (the others crossed with it share its
    # created_at); content-free like every notice.
    budget_alert = models.ForeignKey(
        BudgetAlert, on_delete=models.CASCADE, null=True, blank=True, related_name="notices"
    )
    created_at = models.DateTimeField()
    notify_claimed_at = models.DateTimeField(null=True, blank=True)
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["id"], name="notice_unsent", condition=models.Q(notified_at__isnull=True))
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind="paused", pause_event__isnull=False)
                | models.Q(kind="decided", revision_request__isnull=False)
                | models.Q(kind="completed", occurrence__isnull=False, run_id__isnull=False)
                | models.Q(kind="budget", budget_alert__isnull=False)
                | models.Q(kind="monthly_cap", occurrence__isnull=False),
                name="notice_names_what_it_tells",
            ),
            models.CheckConstraint(
                condition=models.Q(kind="budget") | models.Q(schedule__isnull=False),
                name="notice_names_its_schedule",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} notice for schedule {self.schedule_id}"


# -- revision requests ------------------------------------------------------------------------------


class RevisionRequestQuerySet(OwnedQuerySet["RevisionRequest"]):
    owner_field = "schedule__owner_id"


class RevisionRequest(models.Model):
    """An owner's request for different limits (docs/contract.md#conversations): the complete limits and
    failure limit they suggest and why. Owners cannot change limits (docs/decisions/0002, point 4); an
    admin with the pin permission decides: pin (an explicit revision that records this request) or
    decline, with a reason. One open request per schedule. Its decision writes the owner's notice
    (a Notice row) in the same transaction.
    """

    class State(models.TextChoices):
        OPEN = "open"
        PINNED = "pinned"
        DECLINED = "declined"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="revision_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()
    via = models.CharField(max_length=32, help_text="Where it was asked: dashboard, api.")
    base_revision = models.PositiveIntegerField(help_text="The revision in force when it was asked.")
    limits = models.JSONField(help_text="The complete RunLimits the owner suggests.")
    max_consecutive_failures = models.PositiveIntegerField()
    monthly_cap = MoneyField(null=True, blank=True, help_text="The monthly cap suggested, USD; blank: none.")
    reason = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decline_reason = models.TextField(blank=True)
    # DO_NOTHING: the revision and this row only ever go away together with their schedule.
    revision = models.ForeignKey(
        ScheduleRevision, on_delete=models.DO_NOTHING, null=True, blank=True, related_name="+"
    )

    objects = RevisionRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule"], condition=models.Q(state="open"), name="revision_request_one_open"
            ),
            models.CheckConstraint(condition=~models.Q(reason=""), name="revision_request_has_reason"),
            models.CheckConstraint(
                condition=models.Q(max_consecutive_failures__gte=1),
                name="revision_request_failure_limit_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(state="open", decided_at__isnull=True)
                | (~models.Q(state="open") & models.Q(decided_at__isnull=False)),
                name="revision_request_decided_iff_not_open",
            ),
            models.CheckConstraint(
                condition=models.Q(state="pinned", revision__isnull=False)
                | (~models.Q(state="pinned") & models.Q(revision__isnull=True)),
                name="revision_request_pinned_has_revision",
            ),
            models.CheckConstraint(
                condition=~models.Q(state="declined") | ~models.Q(decline_reason=""),
                name="revision_request_declined_has_reason",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "created_at"], name="revision_request_queue"),
        ]

    def __str__(self) -> str:
        return f"Limits request for “{self.schedule.title}” ({self.state})"

    @property
    def run_limits(self) -> RunLimits:
        return RunLimits.from_json(self.limits)

    @property
    def is_open(self) -> bool:
        return self.state == self.State.OPEN


# Declared as ScheduleRevision is (its choices, then the row it belongs to): fields, not logic.
class RevisionRequestEvent(AppendOnlyModel):
    """The audit of a revision request: asked, pinned or declined, by whom and when."""

    class Action(models.TextChoices):
        REQUESTED = "requested"
        PINNED = "pinned"
        DECLINED = "declined"

    request = models.ForeignKey(RevisionRequest, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=16, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    via = models.CharField(max_length=32)
    detail = models.CharField(max_length=300, blank=True, help_text="The revision pinned, or none.")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} request {self.request_id}"


# -- proposals ----------------------------------------------------------------------------------


class ProposalQuerySet(OwnedQuerySet["Proposal"]):
    """Proposals, by their owner (owned_by)."""


class Proposal(models.Model):
    """A schedule the assistant proposed in a conversation (`schedule.create`), waiting for its
    owner's confirmation (schedules.proposals; docs/contract.md#confirm-before-chat-creates-a-schedule).
    `arguments` are the tool call's, as the model gave them and the validator accepted; the limits are
    those §5's policy pins when it is confirmed. Open until confirmed, declined or expired."""

    class Status(models.TextChoices):
        OPEN = "open"
        CONFIRMED = "confirmed"
        DECLINED = "declined"
        EXPIRED = "expired"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey("runs.Conversation", on_delete=models.CASCADE, related_name="proposals")
    run_id = models.BigIntegerField(null=True, blank=True, help_text="The run whose tool call proposed it.")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    arguments = models.JSONField(help_text="title, prompt and cron with timezone, or run_at.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    schedule = models.ForeignKey(Schedule, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    objects = ProposalQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["expires_at"], name="proposal_open", condition=models.Q(status="open")),
        ]

    def __str__(self) -> str:
        return f"proposal {self.pk} ({self.status})"

    @property
    def title(self) -> str:
        return str(self.arguments.get("title", ""))


# -- the forecast's inputs ------------------------------------------------------------------------


class ForecastState(models.Model):
    """Which owner-local day and zone an owner's forecast rows are for (schedules.forecast.table).
    Every write to the owner's ForecastGroup and ForecastInput rows holds this row's lock, so they
    change one writer at a time; the tick moves the rows on to the next day once `valid_until` (the
    owner's next midnight) has passed, or at once when the owner's zone changed."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    timezone = models.CharField(max_length=64, help_text="The owner's zone the rows were computed in.")
    day = models.DateField(help_text="The owner-local date the groups' `today` are for.")
    valid_until = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["valid_until"], name="forecast_state_due")]

    def __str__(self) -> str:
        return f"forecast of owner {self.owner_id} for {self.day}"


class ForecastGroup(models.Model):
    """Active schedules the forecast simulates together (schedules.forecast.simulation): uncapped
    ones with one cadence and cost limit (`solo` 0), or one capped schedule (`solo` its id). Kept
    by schedules.forecast.table in the transaction of every change that moves it, so that the month's
    forecast reads a few of these rows, however many schedules the owner has. `fires` counts one
    member's fires on each owner-local day of the month of `day` (index 0: the 1st), `today` holds
    the instants (epoch seconds) of its fires on `day`."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Schedule.Kind.choices)
    cron = models.CharField(max_length=120, blank=True)
    timezone = models.CharField(max_length=64)
    run_at = models.DateTimeField(null=True, blank=True)
    max_cost = MoneyField()
    monthly_cap = MoneyField(null=True, blank=True)
    solo = models.BigIntegerField(default=0, help_text="The capped schedule's id; 0: uncapped schedules.")
    members = models.PositiveIntegerField()
    per_fire_sum = MoneyField(max_digits=20, help_text="The members' expected costs per run, summed.")
    first_minute = models.PositiveSmallIntegerField()
    day = models.DateField()
    owner_timezone = models.CharField(max_length=64)
    fires = ArrayField(models.PositiveIntegerField())
    today = ArrayField(models.BigIntegerField())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "kind", "cron", "timezone", "run_at", "max_cost", "monthly_cap", "solo"],
                name="forecast_group_unique",
                nulls_distinct=False,
            ),
            models.CheckConstraint(condition=models.Q(members__gte=1), name="forecast_group_has_members"),
        ]

    def __str__(self) -> str:
        return f"forecast group {self.pk} of owner {self.owner_id} ({self.members} schedules)"


class ForecastInput(models.Model):
    """An active schedule's place in the forecast: its group, and its expected cost per run (the
    median cost of its last 20 completed runs as accounted, at most its `max_cost`; `max_cost` when
    it has none)."""

    schedule = models.OneToOneField(Schedule, on_delete=models.CASCADE, primary_key=True, related_name="+")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(ForecastGroup, on_delete=models.CASCADE, related_name="+")
    per_fire = MoneyField()

    class Meta:
        indexes = [
            # A group's members in order (the simulation's member order), and dearest first (the
            # budget page's table of the schedules expected to spend most).
            models.Index(fields=["group", "schedule"], include=["per_fire"], name="forecast_input_members"),
            models.Index(fields=["group", "-per_fire", "schedule"], name="forecast_input_dearest"),
        ]

    def __str__(self) -> str:
        return f"forecast input of schedule {self.schedule_id}"
