"""The admin's shared pieces for large tables, and the budget rows, reservations and
accounting events. The ledger's changelist is registered in runs/admin.py: it filters by
provider, which is the run layer's vocabulary."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from accounting import alerts
from accounting.models import AccountingEvent, OwnerBudget, Reservation
from accounting.numbers import WholeNumberField

# Every whole number typed into the admin is read by accounting.numbers, as the API reads it.
WHOLE_NUMBERS: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.IntegerField: {"form_class": WholeNumberField}
}


class BoundedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most `cap` rows: one bounded query, never a full COUNT(*) over a big table.

    The count query drops the ordering so the database can stop after `cap + 1` rows without
    sorting the table first. Beyond the cap the changelist says "more than …" and pages stop.
    """

    cap = 10_000

    @cached_property
    def count(self) -> int:
        object_list = self.object_list
        if isinstance(object_list, QuerySet):
            return object_list.order_by()[: self.cap + 1].count()
        return len(object_list)

    @property
    def capped(self) -> bool:
        return self.count > self.cap


class BigTableAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Changelists over large tables: a fixed number of queries and no full COUNT(*)."""

    paginator = BoundedCountPaginator
    show_full_result_count = False
    formfield_overrides = WHOLE_NUMBERS


class ReadOnlyAdmin(BigTableAdmin):
    """Append-only and system-written rows: visible, never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ChoicesFilter(admin.SimpleListFilter):
    """A filter with fixed choices: unlike a filter over a free-text column, it runs no
    SELECT DISTINCT over the whole table to find its options."""

    options: tuple[tuple[str, str], ...] = ()
    lookup: str = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> tuple[tuple[str, str], ...]:
        return self.options

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.lookup: value}) if value else queryset


@admin.register(OwnerBudget)
class OwnerBudgetAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Per-owner overrides of the ceilings and caps; a blank field means the setting applies."""

    formfield_overrides = WHOLE_NUMBERS
    list_display = (
        "owner",
        "timezone",
        "daily_ceiling",
        "monthly_ceiling",
        "schedule_cost_ceiling",
        "max_active_schedules",
        "chat_min_interval_minutes",
        "updated_at",
    )
    list_select_related = ("owner",)
    search_fields = ("owner__username",)
    autocomplete_fields = ("owner",)
    # The owner chooses their alert thresholds (settings page, API), validated there.
    exclude = ("alert_thresholds",)

    def save_model(self, request: HttpRequest, obj: OwnerBudget, form: Any, change: bool) -> None:
        """A ceiling raised mid-period re-arms the alert thresholds now above the level."""
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            alerts.rearm(obj.owner_id)


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "owner", "run_id", "amount", "released_at")
    list_select_related = ("owner",)
    ordering = ("-id",)


@admin.register(AccountingEvent)
class AccountingEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "event", "owner", "schedule_id", "run_id", "status", "failure_reason")
    list_select_related = ("owner",)
    list_filter = ("event",)
    search_fields = ("=schedule_id", "=run_id")
    ordering = ("-id",)

    @admin.display(description="status")
    def status(self, obj: AccountingEvent) -> str:
        return str(obj.payload.get("status", ""))

    @admin.display(description="failure")
    def failure_reason(self, obj: AccountingEvent) -> str:
        failure = obj.failure
        return f"{failure['reason']} ({failure['error_class']})" if failure else "—"
