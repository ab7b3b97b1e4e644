"""The run page and the owner's conversations."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from accounting.selectors import owner_timezone
from config.http import HtmxRequest
from runs import inflight, services
from runs.models import Conversation, Run
from schedules import selectors
from schedules.services import is_admin


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_detail(request: HtmxRequest, pk: int) -> HttpResponse:
    """The run page; while the run is in flight its live part polls this view, and the poll that
    sees the run ended gets the final fragment with 286 so htmx stops polling."""
    run = get_object_or_404(Run.objects.owned_by(request.user).select_related("agent", "conversation"), pk=pk)
    context = {"page": selectors.run_page(run), "owner_tz": owner_timezone(request)}
    if not request.htmx:
        return render(request, "runs/detail.html", context)
    response = render(request, "runs/detail.html#live", context)
    if run.is_terminal:
        return HttpResponseStopPolling(response.content)
    return response


@require_GET
@login_required
def run_writing(request: HtmxRequest, pk: int) -> HttpResponse:
    """The answer as it is being written (docs/decisions/0006-streaming.md): the text the run's
    current model call has streamed so far, polled twice a second by the conversation and run pages
    while the run is in flight; one query. The poll that sees the run ended stops polling (286)."""
    run = get_object_or_404(
        Run.objects.owned_by(request.user).only("id", "owner_id", "status", "partial_text"), pk=pk
    )
    response = render(request, "runs/_writing.html", {"run": run})
    return response if run.status in (Run.Status.QUEUED, Run.Status.RUNNING) else HttpResponseStopPolling(b"")


@require_GET
@login_required
def runs_in_flight(request: HtmxRequest) -> HttpResponse:
    """The strip at the top of the dashboard: the owner's runs in flight and queued (an admin's:
    everyone's, per worker). It polls while anything is in flight or queued."""
    return render(request, "runs/_in_flight.html", in_flight_context(request))


def in_flight_context(request: HtmxRequest) -> dict[str, object]:
    admin = is_admin(request.user)
    return {"in_flight": inflight.in_flight(None if admin else request.user.pk), "in_flight_all": admin}


@require_GET
@login_required
def conversation_list(request: HtmxRequest) -> HttpResponse:
    page = selectors.conversation_page(request.user.pk, request.GET.get("page"))
    tz = owner_timezone(request)
    return render(request, "runs/conversations.html", {"page": page, "owner_tz": tz})


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def conversation_delete(request: HtmxRequest, pk: int) -> HttpResponse:
    """GET: what deleting removes and what stays. POST: delete through the service."""
    conversation = get_object_or_404(Conversation.objects.owned_by(request.user), pk=pk)
    if request.method == "GET":
        context = {"summary": selectors.deletion_summary(conversation)}
        if not request.htmx:
            return render(request, "runs/conversation_delete.html", context)
        part = "slot" if "cancel" in request.GET else "confirm"  # Cancel puts the empty slot back
        return render(request, f"runs/conversation_delete.html#{part}", context)
    try:
        count = services.delete_conversation(conversation)
    except services.ConversationBusy:
        notice = "A run in this conversation is still in flight; cancel it or wait before deleting."
        return _deleted_response(request, conversation, notice, deleted=False)
    except Conversation.DoesNotExist:  # a double submit, or another tab, deleted it a moment ago
        notice = f"“{conversation.title}” was already deleted. Spend and accounting events stay."
        return _deleted_response(request, conversation, notice, deleted=True)
    runs = "1 run" if count == 1 else f"{count} runs"
    notice = f"Deleted “{conversation.title}” and its {runs}. Spend and accounting events stay."
    return _deleted_response(request, conversation, notice, deleted=True)


def _deleted_response(
    request: HtmxRequest, conversation: Conversation, notice: str, *, deleted: bool
) -> HttpResponse:
    if request.htmx:
        context = {"conversation": conversation, "notice": notice, "deleted": deleted}
        return render(request, "runs/conversation_delete.html#done", context)
    messages.add_message(request, messages.SUCCESS if deleted else messages.WARNING, notice)
    return redirect("runs:conversations")
