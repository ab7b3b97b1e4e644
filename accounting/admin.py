from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from accounting.models import AccountingEvent, LedgerEntry, OwnerBudget, Reservation


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Append-only and system-written rows: visible, never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OwnerBudget)
class OwnerBudgetAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "owner",
        "timezone",
        "daily_ceiling",
        "monthly_ceiling",
        "schedule_cost_ceiling",
        "updated_at",
    )
    list_select_related = ("owner",)
    search_fields = ("owner__username",)
    autocomplete_fields = ("owner",)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "owner",
        "provider",
        "model",
        "input_tokens",
        "output_tokens",
        "cost",
        "run_id",
        "schedule_id",
    )
    list_select_related = ("owner",)
    list_filter = ("provider",)
    date_hierarchy = "created_at"
    show_full_result_count = False
    search_fields = ("=run_id", "=schedule_id")


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "owner", "run_id", "amount", "released_at")
    list_select_related = ("owner",)
    show_full_result_count = False


@admin.register(AccountingEvent)
class AccountingEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "event", "owner", "schedule_id", "run_id", "status", "failure_reason")
    list_select_related = ("owner",)
    list_filter = ("event",)
    show_full_result_count = False
    search_fields = ("=schedule_id", "=run_id")

    @admin.display(description="status")
    def status(self, obj: AccountingEvent) -> str:
        return str(obj.payload.get("status", ""))

    @admin.display(description="failure")
    def failure_reason(self, obj: AccountingEvent) -> str:
        failure = obj.failure
        return f"{failure['reason']} ({failure['error_class']})" if failure else "—"
