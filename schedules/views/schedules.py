"""The owner's schedule pages. Views parse input, check ownership, call one service and render;
HTMX requests get a named partial of the same template (django-template-partials)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from accounting.numbers import whole_number
from accounting.selectors import owner_timezone, request_budget, request_summary
from config.http import HtmxRequest, owner_post
from runs.models import Agent
from schedules import forecast, selectors, services
from schedules.forms import ScheduleCompletionForm, ScheduleCreateForm, ScheduleUpdateForm
from schedules.models import Schedule
from schedules.notices import completed
from schedules.schemas import InvalidSchedule
from schedules.views.runs import in_flight_context


def owned_schedule(request: HtmxRequest, pk: int) -> Schedule:
    """The owner's schedule with everything the status panel reads, or 404 (never 403)."""
    schedules = Schedule.objects.owned_by(request.user).select_related(
        "current_revision__agent", "pause__actor"
    )
    return get_object_or_404(schedules, pk=pk)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def schedule_list(request: HtmxRequest) -> HttpResponse:
    tz = owner_timezone(request)
    page = selectors.schedule_list(
        request.user.pk,
        tab=request.GET.get("status", "all"),
        query=request.GET.get("q", "").strip()[:200],
        after=request.GET.get("after"),
        before=request.GET.get("before"),
        start=_whole_number(request.GET.get("start")),
        tz=tz,
    )
    template = "schedules/list.html#results" if _fragment(request) else "schedules/list.html"
    context = {"list": page, "owner_tz": tz, **in_flight_context(request)}
    return render(request, template, context)


def _whole_number(text: str | None) -> int:
    """A display offset from a link this page made; anything else is 0."""
    number = whole_number(text)
    return number if number is not None and number < 10**8 else 0


def _fragment(request: HtmxRequest) -> bool:
    """An htmx swap of part of the page; a history restore or a boosted link wants the page."""
    htmx = request.htmx
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request


@require_GET
@login_required
def schedule_detail(request: HtmxRequest, pk: int) -> HttpResponse:
    schedule = owned_schedule(request, pk)
    tz = owner_timezone(request)
    detail = selectors.schedule_detail(schedule, tz)
    context = {
        "detail": detail,
        "panel": detail.panel,
        "pause_events": detail.pause_events,
        "owner_tz": tz,
        # A pause or resume without JavaScript: its notice goes in the panel, as with HTMX.
        "notice": next((m.message for m in messages.get_messages(request) if "status" in m.tags), ""),
        # The no-JavaScript confirmation of a resume, in the panel (HTMX asks with hx-confirm).
        "confirming": request.GET.get("confirm") == "resume" and schedule.status == Schedule.Status.PAUSED,
        **_chat_context(schedule, detail.history),
        "month": forecast.schedule_forecast(
            schedule, budget=request_budget(request), summary=request_summary(request)
        ),
    }
    return render(request, "schedules/detail.html", context)


def _chat_context(schedule: Schedule, history: list[Any]) -> dict[str, Any]:
    """What the page adds for conversations: which chat revisions' conversations still exist
    (linked from the history) and the schedule's completion-notice setting."""
    ids = {entry.revision.conversation_id for entry in history if entry.revision.conversation_id}
    return {
        "chat_conversations": selectors.chat_conversations(schedule.owner_id, ids),
        "completion": completed.describe(schedule),
    }


@owner_post
def completion_notices(request: HtmxRequest, pk: int) -> HttpResponse:
    """This schedule's override of the owner's completion-notice setting. Idempotent."""
    schedule = owned_schedule(request, pk)
    form = ScheduleCompletionForm(request.POST)
    if form.is_valid():
        schedule = completed.set_schedule_completion_notices(schedule, form.value())
    completion = completed.describe(schedule)
    if request.htmx:
        context = {"schedule": schedule, "completion": completion, "saved": True}
        return render(request, "schedules/_completion_notices.html", context)
    messages.success(request, f"Saved. {completion.sentence}")
    return redirect("schedules:detail", pk=pk)


def _status_response(request: HtmxRequest, schedule: Schedule, notice: str, *, changed: bool) -> HttpResponse:
    """HTMX: the swapped status panel with the notice in it. Plain POST: redirect with a message."""
    if request.htmx:
        schedule = owned_schedule(request, schedule.pk)
        tz = owner_timezone(request)
        context = {
            "panel": selectors.status_panel(schedule, tz),
            "pause_events": selectors.pause_history(schedule),
            "notice": notice,
            "oob": True,  # the pause history below the panel gains the new row too
            "owner_tz": tz,
        }
        return render(request, "schedules/detail.html#status", context)
    # Tagged "status": the detail page shows it inside the status panel, where HTMX puts it too.
    messages.add_message(request, messages.SUCCESS if changed else messages.INFO, notice, extra_tags="status")
    return redirect(reverse("schedules:detail", args=[schedule.pk]) + "#status")


@owner_post
def resume(request: HtmxRequest, pk: int) -> HttpResponse:
    schedule = owned_schedule(request, pk)
    if not request.htmx and request.POST.get("confirmed") != "yes":
        # Without JavaScript there was no hx-confirm: the same sentence, as a step of its own.
        return redirect(reverse("schedules:detail", args=[pk]) + "?confirm=resume#status")
    try:
        schedule = services.resume_schedule(schedule, by=request.user)
    except services.NotPaused:
        return _status_response(
            request, schedule, "This schedule is not paused; nothing changed.", changed=False
        )
    except services.ScheduleLimit as exc:
        return _status_response(request, schedule, f"Not resumed. {exc.message}", changed=False)
    limit = schedule.revision.max_consecutive_failures
    sentence = selectors.count_sentence(schedule.consecutive_failures, limit, kept=True)
    return _status_response(request, schedule, f"Resumed. {sentence}", changed=True)


@owner_post
def pause(request: HtmxRequest, pk: int) -> HttpResponse:
    schedule = owned_schedule(request, pk)
    try:
        schedule = services.pause_schedule(schedule, by=request.user)
    except services.NotActive:
        return _status_response(
            request, schedule, "This schedule is not active; nothing changed.", changed=False
        )
    notice = "Paused. No new runs start until you resume it; the failure count is kept."
    return _status_response(request, schedule, notice, changed=True)


def _agents() -> list[str]:
    return list(Agent.objects.filter(is_active=True).order_by("name").values_list("name", flat=True))


def _preview(request: HtmxRequest, agent_name: str | None) -> dict[str, object]:
    agent = Agent.objects.filter(name=agent_name, is_active=True).first() if agent_name else None
    limits = services.create_policy_limits(agent, request.user.pk) if agent else None
    return {"preview_agent": agent, "preview": limits, "failure_limit": services.CREATE_FAILURE_LIMIT}


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def schedule_create(request: HtmxRequest) -> HttpResponse:
    agents = _agents()
    # "preview" is the no-JavaScript "show its limits" round trip: the form again, as typed, with
    # the chosen agent's limits and nothing saved. The page posts it, so a long prompt never makes
    # an address longer than a server takes; a GET carrying fields (a link) is kept as well.
    previewing = "preview" in request.POST
    typed = request.POST if previewing else request.GET
    initial = {"timezone": owner_timezone(request), **typed.dict()}
    bound = request.POST if request.method == "POST" and not previewing else None
    form = ScheduleCreateForm(bound, agents=agents, initial=initial)
    if bound is not None and form.is_valid():
        try:
            schedule = services.create_schedule(request.user, form.parsed, via="dashboard")
        except InvalidSchedule as exc:
            form.add_field_errors(exc.fields)
        except services.ScheduleLimit as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Created “{schedule.title}”. Its limits are pinned in revision 1.")
            return _to_detail(request, schedule)
    chosen = form["agent"].value() or (agents[0] if agents else None)
    context = {"form": form, "creating": True, **_preview(request, chosen)}
    template = "schedules/form.html#form" if request.htmx else "schedules/form.html"
    return render(request, template, context)


def _to_detail(request: HtmxRequest, schedule: Schedule) -> HttpResponse:
    url = reverse("schedules:detail", args=[schedule.pk])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_GET
@login_required
def limits_preview(request: HtmxRequest) -> HttpResponse:
    """The limits schedule.create would pin for the chosen agent (the live preview)."""
    return render(request, "schedules/form.html#preview", _preview(request, request.GET.get("agent")))


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def schedule_edit(request: HtmxRequest, pk: int) -> HttpResponse:
    schedule = owned_schedule(request, pk)
    if schedule.status == Schedule.Status.COMPLETED:
        messages.info(request, "A completed schedule cannot be edited.")
        return redirect("schedules:detail", pk=pk)
    form = ScheduleUpdateForm(request.POST or None, schedule=schedule)
    if request.method == "POST" and form.is_valid():
        try:
            updated = services.update_schedule(schedule, form.parsed, by=request.user, via="dashboard")
        except InvalidSchedule as exc:
            form.add_field_errors(exc.fields)
        except services.ScheduleCompleted:
            form.add_error(None, "A completed schedule cannot be edited.")
        else:
            changed = updated.revision.number != schedule.revision.number
            messages.success(
                request, f"Saved as revision {updated.revision.number}." if changed else "No changes."
            )
            return _to_detail(request, updated)
    context = {"form": form, "schedule": schedule, "creating": False}
    return render(request, "schedules/form.html#form" if request.htmx else "schedules/form.html", context)
