"""The money and the record: owner budgets, ledger entries, reservations, accounting events.

Ledger entries and accounting events are content-free and append-only. They refer to runs and schedules
by id, not by foreign key, so deleting a conversation, run or schedule never removes recorded spend or
the record of what happened (docs/contract.md#schedules, docs/decisions/0002, point 3).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar, Self, TypeVar

from django import forms
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import JSONField, Value

from accounting.money import USD_PLACES, format_money, parse_money
from accounting.timezones import is_time_zone
from accounting.tokens import InputByKind

OwnedRow = TypeVar("OwnedRow", bound=models.Model)


class MoneyFormField(forms.CharField):
    """An amount typed into a form (the admin's budgets, ceilings and prices), read by the one
    money parser: "5_0" or "5E+0" is a field error, never 50 or 5."""

    def __init__(self, *, places: int = USD_PLACES, **kwargs: Any) -> None:
        self.places = places
        for key in ("max_digits", "decimal_places", "localize"):
            kwargs.pop(key, None)
        kwargs.setdefault("widget", forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Decimal | None:  # type: ignore[override]
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return parse_money(text, str(self.label or "amount"), places=self.places)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    def prepare_value(self, value: Any) -> Any:
        return format_money(value) if isinstance(value, Decimal) else value


class MoneyField(models.DecimalField):  # type: ignore[type-arg]
    """USD as fixed-point with 6 decimal places (docs/contract.md#run-limits). In a form it is typed as
    text and read by accounting.money, with `places` decimals allowed (2 for USD amounts, 6 for prices);
    the database column is the same either way, so `places` is left out of migrations."""

    def __init__(self, *args: Any, places: int = USD_PLACES, **kwargs: Any) -> None:
        self.places = places
        kwargs.setdefault("max_digits", 14)
        kwargs.setdefault("decimal_places", 6)
        super().__init__(*args, **kwargs)

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": MoneyFormField, "places": self.places, **kwargs})


class OwnedQuerySet(models.QuerySet[OwnedRow]):
    """Rows that belong to an owner: `owned_by(user)` keeps that user's; `owner_field` says where a
    row names its owner (its own owner_id, or its schedule's)."""

    owner_field: ClassVar[str] = "owner_id"

    def owned_by(self, user: AbstractBaseUser | AnonymousUser) -> Self:
        return self.filter(**{self.owner_field: user.pk})


class AppendOnlyError(RuntimeError):
    """An attempt to change or delete a row that is only ever appended."""


class AppendOnlyQuerySet(models.QuerySet[Any]):
    def update(self, **kwargs: Any) -> int:
        """Refused, except for the columns a model names in `MUTABLE_FIELDS` (bookkeeping such as
        an outbox's delivery state, never the record itself)."""
        allowed: frozenset[str] = getattr(self.model, "MUTABLE_FIELDS", frozenset())
        if not kwargs or not set(kwargs) <= allowed:
            raise AppendOnlyError(f"{self.model.__name__} rows are append-only; write a new row instead.")
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only and are never deleted.")


class AppendOnlyModel(models.Model):
    """`save()` inserts once; updating or deleting through the ORM raises AppendOnlyError."""

    objects: ClassVar[Any] = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only; write a new row instead.")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only and are never deleted.")


def validate_timezone(value: str) -> None:
    if not is_time_zone(value):
        raise ValidationError(f"{str(value)[:64]!r} is not an IANA time zone (for example Europe/Riga).")


def default_alert_thresholds() -> list[int]:
    return [50, 80, 100]


class OwnerBudget(models.Model):
    """One row per owner: the time zone budget days are counted in, and ceiling overrides.

    Admission locks this row, so concurrent admissions for one owner queue here
    (docs/contract.md#schedules). A blank override means the setting applies.
    """

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget")
    timezone = models.CharField(
        max_length=64, default="UTC", validators=[validate_timezone], help_text="IANA time zone of the owner."
    )
    daily_ceiling = MoneyField(null=True, blank=True, help_text="USD; blank = setting.")
    monthly_ceiling = MoneyField(null=True, blank=True, help_text="USD; blank = setting.")
    schedule_cost_ceiling = MoneyField(
        null=True,
        blank=True,
        help_text="Largest max_cost a new schedule pins, USD; blank = setting.",
    )
    # Caps on what an owner (or a model talking for them) may set up (docs/contract.md#schedules,
    # per-owner caps).
    max_active_schedules = models.PositiveIntegerField(
        null=True, blank=True, help_text="Active schedules this owner may have at once; blank = setting."
    )
    chat_min_interval_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Shortest interval between fires of a schedule made in chat, minutes; blank = setting.",
    )
    # Percentages of the daily and monthly ceilings the owner is told about on crossing
    # (accounting.alerts; docs/contract.md#money-the-owner-sees-coming).
    alert_thresholds = models.JSONField(default=default_alert_thresholds, db_default=[50, 80, 100])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(daily_ceiling__isnull=True) | models.Q(daily_ceiling__gt=0),
                name="budget_daily_ceiling_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(monthly_ceiling__isnull=True) | models.Q(monthly_ceiling__gt=0),
                name="budget_monthly_ceiling_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(schedule_cost_ceiling__isnull=True)
                | models.Q(schedule_cost_ceiling__gt=0),
                name="budget_schedule_ceiling_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(chat_min_interval_minutes__isnull=True)
                | models.Q(chat_min_interval_minutes__gte=1, chat_min_interval_minutes__lte=10080),
                name="budget_chat_interval_range",
            ),
            models.CheckConstraint(
                condition=models.Q(max_active_schedules__isnull=True)
                | models.Q(max_active_schedules__lte=100000),
                name="budget_max_active_schedules_range",
            ),
        ]

    def __str__(self) -> str:
        return f"Budget of {self.owner}"

    @property
    def effective_daily_ceiling(self) -> Decimal:
        return self.daily_ceiling if self.daily_ceiling is not None else settings.DAILY_COST_CEILING

    @property
    def effective_monthly_ceiling(self) -> Decimal:
        return self.monthly_ceiling if self.monthly_ceiling is not None else settings.MONTHLY_COST_CEILING

    @property
    def effective_max_active_schedules(self) -> int:
        if self.max_active_schedules is not None:
            return self.max_active_schedules
        return int(settings.MAX_ACTIVE_SCHEDULES)

    @property
    def effective_chat_min_interval_minutes(self) -> int:
        if self.chat_min_interval_minutes is not None:
            return self.chat_min_interval_minutes
        return int(settings.CHAT_MIN_INTERVAL_MINUTES)

    @property
    def effective_schedule_cost_ceiling(self) -> Decimal:
        if self.schedule_cost_ceiling is not None:
            return Decimal(self.schedule_cost_ceiling)
        return Decimal(settings.SCHEDULE_COST_CEILING)


class LedgerEntry(InputByKind, AppendOnlyModel):
    """One provider call's usage and cost, as the provider bills it (docs/contract.md#dollars-as-billed).
    Content-free; outlives the run and its conversation.

    `input_tokens` is all of the call's input and the cache counts are parts of it; `output_tokens`
    is all output, reasoning included. `cost` is what was charged: the provider's reported charge
    when it reports one, else `computed_cost` from `prices`, the price sheet used (kept with the
    entry, so a later catalogue never changes recorded spend). `charged_by_kind` splits `cost` by
    kind of token. Entries from before usage was recorded by kind have empty breakdowns."""

    created_at = models.DateTimeField(db_index=True)
    owner = models.ForeignKey(  # no index of its own: ledger_owner_time leads with it
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    run_id = models.BigIntegerField(db_index=True)
    schedule_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    step = models.PositiveIntegerField(null=True, blank=True, help_text="The run's step this call was.")
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=128)
    input_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    cache_read_tokens = models.PositiveIntegerField(default=0, db_default=0)
    cache_write_5m_tokens = models.PositiveIntegerField(default=0, db_default=0)
    cache_write_1h_tokens = models.PositiveIntegerField(default=0, db_default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0, db_default=0)
    cost = MoneyField()
    computed_cost = MoneyField(null=True, blank=True)
    reported_cost = MoneyField(null=True, blank=True)
    # Database defaults too: rows written by plain SQL (the benches' seeds) need not name them.
    charged_by_kind = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    prices = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # The call was cut before its usage arrived (docs/decisions/0006-streaming.md): its tokens and
    # cost are an estimate that never undercounts, and `prices["basis"]` says why.
    estimated = models.BooleanField(default=False, db_default=False)

    class Meta:
        verbose_name_plural = "ledger entries"
        # Covering (PostgreSQL): an owner's spend for a day or a month is an index-only scan.
        indexes = [
            models.Index(
                fields=["owner", "created_at"], include=["cost", "schedule_id"], name="ledger_owner_time"
            )
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(cost__gte=0), name="ledger_cost_non_negative"),
            models.CheckConstraint(
                condition=models.Q(reported_cost__isnull=True) | models.Q(reported_cost__gte=0),
                name="ledger_reported_cost_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model} USD {self.cost} (run {self.run_id})"

    @property
    def reported_differs(self) -> bool:
        """The provider's reported charge and our computed one differ by more than 1 %."""
        if self.reported_cost is None or self.computed_cost is None:
            return False
        return bool(abs(self.reported_cost - self.computed_cost) > self.computed_cost / 100)


class UsageRollup(models.Model):
    """The ledger's tokens by kind and cost by kind, per owner, provider and model, per UTC
    quarter-hour and day: "this month's spend by model and by token kind" for the heaviest owner
    reads a few hundred rows. Written in the statement of every ledger entry (accounting.ledger),
    compared with the ledger by `manage.py check_rollups`."""

    owner = models.ForeignKey(  # no index of its own: the unique bucket leads with it
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=128)
    grain = models.CharField(max_length=1, choices=[("q", "quarter-hour"), ("d", "day")])
    start = models.DateTimeField()
    calls = models.PositiveIntegerField(default=0)
    cost = MoneyField(default=Decimal(0))
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_5m_tokens = models.BigIntegerField(default=0)
    cache_write_1h_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost_input = MoneyField(default=Decimal(0))
    cost_cache_read = MoneyField(default=Decimal(0))
    cost_cache_write = MoneyField(default=Decimal(0))
    cost_output = MoneyField(default=Decimal(0))

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "grain", "start", "provider", "model"], name="usage_rollup_bucket_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"owner {self.owner_id} {self.provider}/{self.model} {self.grain} {self.start:%Y-%m-%d %H:%M}"


class SpendRollup(models.Model):
    """The ledger summed per owner and key (0: all their spend; a schedule id; -1: interactive
    runs) per UTC quarter-hour, day or month. Maintained in the transaction of every ledger entry,
    never by hand; `manage.py check_rollups` compares it with the ledger (accounting.rollups)."""

    class Grain(models.TextChoices):
        QUARTER = "q", "quarter-hour"
        DAY = "d", "day"
        MONTH = "m", "month"

    owner = models.ForeignKey(  # no index of its own: the unique bucket leads with it
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    key = models.BigIntegerField()
    grain = models.CharField(max_length=1, choices=Grain.choices)
    start = models.DateTimeField()
    cost = MoneyField()

    class Meta:
        constraints = [
            # No covering INCLUDE of cost: an index on it would make every addition a non-HOT
            # update (a new index entry per step); a read is a few hundred heap rows anyway.
            models.UniqueConstraint(fields=["owner", "key", "grain", "start"], name="rollup_bucket_unique"),
            models.CheckConstraint(condition=models.Q(cost__gte=0), name="rollup_cost_non_negative"),
        ]
        indexes = [
            # The budget chart ranks an owner's schedules by their month rows: one per schedule,
            # without walking every schedule's quarter-hours in the unique index's key order.
            models.Index(fields=["owner", "start"], condition=models.Q(grain="m"), name="rollup_months"),
        ]

    def __str__(self) -> str:
        return f"owner {self.owner_id} key {self.key} {self.grain} {self.start:%Y-%m-%d %H:%M}"


class Reservation(models.Model):
    """Cost held against the owner's ceilings while a run is in flight; released when it ends."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    run_id = models.BigIntegerField(unique=True)
    amount = MoneyField()
    created_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["owner"],
                condition=models.Q(released_at__isnull=True),
                name="reservation_open_by_owner",
            )
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="reservation_amount_positive"),
        ]

    def __str__(self) -> str:
        state = "released" if self.released_at else "open"
        return f"USD {self.amount} for run {self.run_id} ({state})"


class AccountingEvent(AppendOnlyModel):
    """An append-only, content-free record such as `schedule.run_accounted` (docs/contract.md#schedules)."""

    class Kind(models.TextChoices):
        RUN_ACCOUNTED = "schedule.run_accounted", "schedule.run_accounted"
        # A provider response that arrived after the run was accounted (its worker was frozen
        # and reaped, or it was cancelled): the extra usage, so events sum to the run's counters.
        LATE_USAGE = "schedule.late_usage_accounted", "schedule.late_usage_accounted"

    event = models.CharField(max_length=64, choices=Kind.choices)
    created_at = models.DateTimeField(db_index=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    schedule_id = models.BigIntegerField(null=True, blank=True)
    run_id = models.BigIntegerField(null=True, blank=True)
    payload = models.JSONField()

    class Meta:
        indexes = [models.Index(fields=["schedule_id", "-created_at"], name="event_schedule_newest")]

    def __str__(self) -> str:
        return f"{self.event} schedule {self.schedule_id} run {self.run_id}"

    @property
    def failure(self) -> dict[str, Any] | None:
        return self.payload.get("failure")  # type: ignore[no-any-return]


class BudgetAlert(models.Model):
    """A threshold of a ceiling crossed in a period (accounting.alerts): one row per owner, period,
    period start and threshold, so fifty runs crossing together record it once. Written with the
    notice that tells the owner; a raised ceiling re-arms the rows above the new level (`rearmed_at`)."""

    class Period(models.TextChoices):
        DAY = "day"
        MONTH = "month"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    period = models.CharField(max_length=8, choices=Period.choices)
    period_start = models.DateField(help_text="The owner-local day, or the first day of the month.")
    threshold = models.PositiveSmallIntegerField()
    ceiling = MoneyField(help_text="The ceiling in force when it was crossed, USD.")
    level = MoneyField(help_text="Spent + open reservations when it was crossed, USD.")
    created_at = models.DateTimeField()
    # The thresholds one judgement recorded share it: their one notice names them all.
    batch = models.UUIDField()
    # Set when a raised ceiling put the threshold above the level again: it may be crossed anew.
    rearmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "period", "period_start", "threshold"],
                condition=models.Q(rearmed_at__isnull=True),
                name="budget_alert_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.threshold} % of the {self.period} ceiling ({self.period_start})"
