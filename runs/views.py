from __future__ import annotations

import json
import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from config.http import HtmxRequest
from runs import services
from runs.models import Conversation, Run
from runs.providers import simulated
from schedules import selectors

logger = logging.getLogger(__name__)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_detail(request: HtmxRequest, pk: int) -> HttpResponse:
    """The run page; while the run is in flight its live part polls this view, and the poll that
    sees the run ended gets the final fragment with 286 so htmx stops polling."""
    run = get_object_or_404(Run.objects.owned_by(request.user).select_related("agent", "conversation"), pk=pk)
    context = {"page": selectors.run_page(run), "owner_tz": selectors.owner_timezone(request.user.pk)}
    if not request.htmx:
        return render(request, "runs/detail.html", context)
    response = render(request, "runs/detail.html#live", context)
    if run.is_terminal:
        return HttpResponseStopPolling(response.content)
    return response


@require_GET
@login_required
def conversation_list(request: HtmxRequest) -> HttpResponse:
    page = selectors.conversation_page(request.user.pk, request.GET.get("page"))
    tz = selectors.owner_timezone(request.user.pk)
    return render(request, "runs/conversations.html", {"page": page, "owner_tz": tz})


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def conversation_delete(request: HtmxRequest, pk: int) -> HttpResponse:
    """GET: what deleting removes and what stays. POST: delete through the service."""
    conversation = get_object_or_404(Conversation.objects.owned_by(request.user), pk=pk)
    if request.method == "GET":
        context = {"summary": selectors.deletion_summary(conversation)}
        template = (
            "runs/conversation_delete.html#confirm" if request.htmx else "runs/conversation_delete.html"
        )
        return render(request, template, context)
    try:
        count = services.delete_conversation(conversation)
    except services.ConversationBusy:
        notice = "A run in this conversation is still in flight; cancel it or wait before deleting."
        return _deleted_response(request, conversation, notice, deleted=False)
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


@csrf_exempt  # a machine endpoint speaking the OpenAI wire format; no session, no cookies
@require_POST
def simulator(request: HttpRequest) -> HttpResponse:
    """The simulated provider over real HTTP (SPEC §9)."""
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        body = None
    status, headers, payload = simulated.respond(body)
    response = JsonResponse(payload, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


@csrf_exempt  # a machine endpoint; no session, no cookies
@require_POST
def webhook_sink(request: HttpRequest) -> HttpResponse:
    """A local webhook receiver for trying pause notifications in development: it accepts any
    POST, logs its event and signature header (never the body), and answers 204."""
    logger.info(
        "webhook sink: %s, %d bytes, signature %s",
        request.headers.get("X-Schedules-Event", "?"),
        len(request.body),
        request.headers.get("X-Schedules-Signature", "missing")[:20] + "…",
    )
    return HttpResponse(status=204)
