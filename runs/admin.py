from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Count, Max, Subquery
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone

from accounting.admin import WHOLE_NUMBERS, BoundedCountPaginator, ChoicesFilter, ReadOnlyAdmin
from accounting.models import LedgerEntry, MoneyFormField
from accounting.money import PRICE_PLACES, format_money
from runs import pricing, services
from runs.limits import InvalidLimits, validate_limits
from runs.models import Agent, AgentCredentialChange, Conversation, Run, TranscriptEntry


class ProviderFilter(ChoicesFilter):
    """Provider adapter names as runs and the ledger record them, as fixed choices (a filter
    over the free-text column would read every distinct value of a large table)."""

    title = "provider"
    parameter_name = "provider"
    options = tuple(Agent.Provider.choices)
    lookup = "provider"


class WorkerFilter(admin.SimpleListFilter):
    """The worker processes with runs in flight now ("host:pid", the distinct values of the running
    runs only, read through the status index), to see what each holds (runs.inflight); a worker
    without a heartbeat within the lease reads "lost". And the worker chosen, whether or not it
    holds a run now (a link to the runs of a worker that finished them or was lost). Django drops
    a filter that offers nothing, and with it the filtering: without the chosen worker among the
    choices, no run in flight would list every run."""

    title = "worker (runs in flight)"
    parameter_name = "worker"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        silent_since = timezone.now() - timedelta(seconds=settings.RUN_LEASE_SECONDS)
        running = Run.objects.filter(status=Run.Status.RUNNING).exclude(worker="")
        workers = running.values("worker").annotate(runs=Count("id"), beat=Max("heartbeat_at"))
        choices = []
        for row in workers.order_by("worker")[:50]:
            lost = row["beat"] is None or row["beat"] < silent_since
            state = ", lost: no heartbeat within the lease" if lost else ""
            choices.append((row["worker"], f"{row['worker']} ({row['runs']} running{state})"))
        chosen = self.value()
        if chosen and all(worker != chosen for worker, _ in choices):
            choices.append((chosen, f"{chosen} (none running)"))
        return choices

    def queryset(self, request: Any, queryset: Any) -> Any:
        """The worker's runs, from its newest down. PostgreSQL lists them newest first by walking
        the primary key backwards, expecting the worker's rows spread over the table; but a
        worker is one process ("host:pid"), its runs a stretch of the past, and without a bound the
        walk would first skip every run since (a worker of last week: the whole week's runs). The
        worker's newest id, one read of the index run_worker_newest, is where the walk starts."""
        worker = self.value()
        if not worker:
            return queryset
        newest = Run.objects.filter(worker=worker).order_by("-id").values("id")[:1]
        return queryset.filter(worker=worker, id__lte=Subquery(newest))


def _https_by_default(field: models.Field, **kwargs: Any) -> Any:  # type: ignore[type-arg]
    """A URL typed without a scheme is https (Django 6.0's default, chosen now)."""
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)


def _price_field(kind: str) -> MoneyFormField:
    return MoneyFormField(
        places=PRICE_PLACES,
        required=False,
        label=f"{pricing.KIND_LABELS[kind]} (USD per million tokens)",
        help_text="Blank: the catalogue's price."
        if kind in pricing.REQUIRED_KINDS
        else "Blank: the input price.",
    )


# What an agent does once it runs: the form's fields and the admin's "Behaviour" section.
BEHAVIOUR_FIELDS = (
    "system_prompt",
    "tools",
    "default_limits",
    "cost_limit",
    "max_output_tokens",
    "history_turns",
    "history_tokens",
)


class AgentForm(ModelForm):  # type: ignore[type-arg]
    """An agent, with its own prices per kind of token as one field each (stored together in
    `prices`). All blank: the price catalogue's prices for its provider and model; the model's
    clean() refuses an active agent that has neither (runs.pricing)."""

    price_input = _price_field("input")
    price_cache_read = _price_field("cache_read")
    price_cache_write_5m = _price_field("cache_write_5m")
    price_cache_write_1h = _price_field("cache_write_1h")
    price_output = _price_field("output")

    class Meta:
        model = Agent
        formfield_callback = _https_by_default
        fields = (
            "name",
            "provider",
            "model",
            "base_url",
            "api_key_setting",
            *BEHAVIOUR_FIELDS,
            "is_active",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for kind, value in (self.instance.prices or {}).items():
            if f"price_{kind}" in self.fields:
                self.initial[f"price_{kind}"] = value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        prices = {
            kind: format_money(cleaned[f"price_{kind}"])
            for kind in pricing.KINDS
            if cleaned.get(f"price_{kind}") is not None
        }
        probe = Agent(
            provider=cleaned.get("provider", self.instance.provider),
            base_url=cleaned.get("base_url", self.instance.base_url) or "",
            model=cleaned.get("model", self.instance.model) or "",
            prices=prices,
            is_active=cleaned.get("is_active", False),
        )
        problem = probe.price_problem()
        if problem:
            named = next((kind for kind in pricing.KINDS if f"prices.{kind}" in problem), "input")
            self.add_error(f"price_{named}", problem)
        self.instance.prices = prices
        return cleaned

    def clean_default_limits(self) -> Any:
        try:
            return validate_limits(self.cleaned_data["default_limits"]).to_json()
        except InvalidLimits as exc:
            raise ValidationError(list(exc.fields.values())) from None


class CredentialChangeInline(admin.TabularInline):  # type: ignore[type-arg]
    """The record of credential changes: who, when, old -> new (never a key, only its variable)."""

    model = AgentCredentialChange
    fields = ("changed_at", "changed_by", "field", "old_value", "new_value")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "credential changes"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Agents. Their provider, base URL and API-key setting are a separate power
    (`change_agent_credentials`): without it they are read-only here, and adding an agent, which
    sets them, needs it too. Every change to them is recorded below the agent."""

    form = AgentForm
    inlines = [CredentialChangeInline]
    formfield_overrides = {**WHOLE_NUMBERS, models.URLField: {"assume_scheme": "https"}}
    list_display = ("name", "provider", "model", "prices_used", "cost_limit", "is_active")
    list_filter = ("provider", "is_active")
    search_fields = ("name", "model")
    fieldsets = (
        (None, {"fields": ("name", "provider", "model", "base_url", "api_key_setting", "is_active")}),
        (
            "Prices",
            {
                "fields": (
                    "catalogue_prices",
                    "price_input",
                    "price_cache_read",
                    "price_cache_write_5m",
                    "price_cache_write_1h",
                    "price_output",
                ),
                "description": (
                    "What its calls are charged, per million tokens of each kind. Leave them blank to use "
                    "the price catalogue's; give at least input and output for a self-hosted or unknown "
                    "model. Each ledger entry keeps the prices it was charged at."
                ),
            },
        ),
        (
            "Behaviour",
            {"fields": BEHAVIOUR_FIELDS},
        ),
    )

    @admin.display(description="prices")
    def prices_used(self, obj: Agent) -> str:
        if obj.prices:
            return "own: " + ", ".join(f"{kind} {value}" for kind, value in obj.prices.items())
        found = pricing.catalogue_sheet(obj.provider, obj.base_url, obj.model)
        return found.source if found else "none: it cannot run"

    @admin.display(description="catalogue prices")
    def catalogue_prices(self, obj: Agent | None) -> str:
        if obj is None or not obj.model:
            return "Save the provider and model to see the catalogue's prices."
        found = pricing.catalogue_sheet(obj.provider, obj.base_url, obj.model)
        if found is None:
            return f"The catalogue ({pricing.catalogue_version()}) has no price for {obj.model!r} here."
        kinds = pricing.PROVIDER_KINDS.get(obj.provider, pricing.KINDS)
        rates = ", ".join(
            f"{pricing.KIND_LABELS[k].lower()} USD {format_money(found.base.of(k))}" for k in kinds
        )
        tiers = "".join(
            f"; above {threshold:,} input tokens the whole request at input USD "
            f"{format_money(tier.input)}, output USD {format_money(tier.output)}"
            for threshold, tier in found.tiers
        )
        return f"{found.source}: {rates} per million tokens{tiers}."

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revisions and runs refer to agents: retire one with is_active instead

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and services.may_change_credentials(request.user)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if services.may_change_credentials(request.user):
            return ("catalogue_prices",)
        return ("catalogue_prices", *Agent.CREDENTIAL_FIELDS)

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        services.save_agent(obj, by=request.user)  # type: ignore[arg-type]


BUSY = "“{title}” has a run in flight and was kept; cancel the run first."


class TranscriptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = TranscriptEntry
    fields = ("seq", "step", "role", "tool_name", "is_error", "content")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "owner",
        "agent",
        "kind",
        "status",
        "failure_reason",
        "error_class",
        "provider",
        "provider_code",
        "http_status",
        "steps",
        "model_calls",
        "tool_calls",
        "cost",
        "worker",
    )
    list_select_related = ("owner", "agent")
    # failure_reason and error_class take their choices from runs.failures: fixed filters.
    list_filter = ("status", "kind", "failure_reason", "error_class", ProviderFilter, WorkerFilter)
    search_fields = ("=id",)
    # The primary key follows creation order and is indexed; "-created_at" would sort the table.
    ordering = ("-id",)
    inlines = [TranscriptInline]
    fieldsets = (
        (
            None,
            {"fields": ("owner", "conversation", "agent", "kind", "parent", "status", "prompt", "answer")},
        ),
        ("Limits and usage", {"fields": ("limits", "steps", "model_calls", "tool_calls", "cost")}),
        ("Synthesis", {"fields": ("synthesis_dimension", "synthesis_step")}),
        (
            "Failure and diagnostics",
            {
                "fields": (
                    "failure_reason",
                    "error_class",
                    "failure_dimension",
                    "transient",
                    "provider",
                    "provider_code",
                    "http_status",
                    "provider_parameter",
                    "failure_message",
                )
            },
        ),
        (
            "Times and worker",
            {"fields": ("created_at", "started_at", "finished_at", "heartbeat_at", "attempt", "worker")},
        ),
    )


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Conversations. The one thing an admin may change is the agent it continues with, and that
    is a credentials-level power (another agent: other tools, prices, provider): without
    `change_agent_credentials` it is read-only here; every switch is recorded and listed."""

    list_display = ("id", "title", "owner", "agent", "created_at")
    list_select_related = ("owner", "agent")
    paginator = BoundedCountPaginator
    show_full_result_count = False
    search_fields = ("title",)
    fields = ("owner", "title", "agent", "metadata", "created_at", "last_activity_at", "agent_changes")
    readonly_fields = ("owner", "title", "metadata", "created_at", "last_activity_at", "agent_changes")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if services.may_change_credentials(request.user):
            return self.readonly_fields
        return (*self.readonly_fields, "agent")

    @admin.display(description="agent changes")
    def agent_changes(self, obj: Conversation) -> str:
        return (
            "; ".join(
                f"{c.changed_at:%Y-%m-%d %H:%M} UTC by {c.changed_by or 'a deleted user'}: "
                f"{c.old_agent or '(none)'} → {c.new_agent}"
                for c in services.agent_changes(obj.pk)
            )
            or "none"
        )

    def save_model(self, request: HttpRequest, obj: Conversation, form: Any, change: bool) -> None:
        if "agent" in form.changed_data and obj.agent is not None:
            services.change_conversation_agent(obj, obj.agent, by=request.user)  # type: ignore[arg-type]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Runs and transcripts go with their conversation through the service, which is the
        # permission that matters here; runs themselves stay read-only in the admin.
        deleted, counts, _perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        conversation = self.get_object(request, object_id)
        if request.method == "POST" and conversation is not None and conversation.runs.in_flight().exists():
            self.message_user(request, BUSY.format(title=conversation.title), messages.WARNING)
            return redirect(reverse("admin:runs_conversation_change", args=[conversation.pk]))
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Conversation) -> None:
        self.delete_queryset(request, [obj])

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for conversation in queryset:
            try:
                services.delete_conversation(conversation)
            except Conversation.DoesNotExist:
                pass  # deleted by someone else meanwhile: what was asked is done
            except services.ConversationBusy:
                self.message_user(request, BUSY.format(title=conversation.title), messages.WARNING)


class ReportedCostFilter(admin.SimpleListFilter):
    """Calls whose provider-reported charge differs from the computed one by more than 1 %
    (docs/contract.md#reported-cost-wins): a price the catalogue has wrong, or a provider
    billing something we do not know about."""

    title = "reported charge"
    parameter_name = "reported"

    def lookups(self, request: HttpRequest, model_admin: Any) -> tuple[tuple[str, str], ...]:
        return (("differs", "differs from ours by more than 1 %"), ("any", "reported by the provider"))

    def queryset(self, request: HttpRequest, queryset: models.QuerySet[Any]) -> models.QuerySet[Any]:
        if self.value() == "any":
            return queryset.filter(reported_cost__isnull=False)
        if self.value() == "differs":
            return queryset.filter(reported_cost__isnull=False, computed_cost__isnull=False).filter(
                models.Q(reported_cost__gt=models.F("computed_cost") * Decimal("1.01"))
                | models.Q(reported_cost__lt=models.F("computed_cost") * Decimal("0.99"))
            )
        return queryset


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "owner",
        "provider",
        "model",
        "input_tokens",
        "cached",
        "output_tokens",
        "cost",
        "charged_as",
        "run_id",
        "schedule_id",
    )
    list_select_related = ("owner",)
    # Fixed date ranges instead of a date hierarchy, which reads every distinct year of the table.
    list_filter = (ProviderFilter, ReportedCostFilter, ("created_at", admin.DateFieldListFilter))
    search_fields = ("=run_id", "=schedule_id")
    ordering = ("-id",)

    @admin.display(description="cache read / written")
    def cached(self, obj: LedgerEntry) -> str:
        written = obj.cache_write_5m_tokens + obj.cache_write_1h_tokens
        return f"{obj.cache_read_tokens:,} / {written:,}" if obj.cache_read_tokens or written else "—"

    @admin.display(description="charged as")
    def charged_as(self, obj: LedgerEntry) -> str:
        if obj.reported_cost is None:
            return "computed" if obj.computed_cost is not None else "—"
        if obj.computed_cost is None:
            return "reported"
        if obj.reported_differs:
            return f"reported; ours USD {format_money(obj.computed_cost)}, differs by more than 1 %"
        return "reported (ours agrees)"
