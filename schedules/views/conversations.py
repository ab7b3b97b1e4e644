"""Talking to the assistant: a new conversation, its page, a message, Stop, and confirming or
declining a schedule the assistant proposed (docs/contract.md#confirm-before-chat-creates-a-schedule).

Sending never waits on the provider: the view queues the run (with its reservation and its
django-q2 task, in one transaction) and returns. The page then polls its tail, the newest
exchange, every second while a run is in flight; the poll that sees the run ended gets the
final fragment with 286 so htmx stops. Without JavaScript every form posts and redirects, and
a refresh shows the same progress.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ObjectDoesNotExist
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling

from accounting.numbers import whole_number
from accounting.selectors import owner_timezone
from config.http import HtmxRequest, owner_post
from runs import conversations, services
from runs.models import Agent, Conversation, Run
from runs.tasks import enqueue_runs
from schedules import proposals, selectors
from schedules.forms import ConversationForm, MessageForm
from schedules.models import Proposal
from schedules.services import ScheduleLimit

REFUSED = (
    conversations.RunInProgress,
    conversations.ScheduledConversation,
    conversations.AgentRetired,
    conversations.NotAdmitted,
)
# A "yes" that could not confirm the proposal it answers: the message is not sent.
NOT_CONFIRMED = (proposals.ProposalInvalid, ScheduleLimit)
# Why a proposal's Confirm or Decline did nothing, each with its `message`.
UNDECIDED = (
    proposals.ProposalDeclined,
    proposals.ProposalExpired,
    proposals.ProposalConfirmed,
    proposals.ProposalInvalid,
    ScheduleLimit,
)


def _mine(request: HtmxRequest, pk: int) -> Conversation:
    return get_object_or_404(Conversation.objects.owned_by(request.user).select_related("agent"), pk=pk)


def _page_context(request: HtmxRequest, conversation: Conversation, **extra: Any) -> dict[str, Any]:
    before = request.GET.get("before", "")
    thread = selectors.conversation_thread(conversation, before=whole_number(before))
    agent = thread.agent
    return {
        "thread": thread,
        "older": bool(before),
        "form": extra.pop("form", None) or MessageForm(),
        "limits": services.interactive_limits(agent) if agent else None,
        "max_chars": conversations.max_message_chars(),
        "owner_tz": owner_timezone(request),
        **extra,
    }


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def conversation_new(request: HtmxRequest) -> HttpResponse:
    agents = list(Agent.objects.filter(is_active=True).order_by("name").values_list("name", flat=True))
    last = conversations.last_agent(request.user.pk)
    initial = {"agent": last.name if last else ("sim-assistant" if "sim-assistant" in agents else "")}
    form = ConversationForm(request.POST or None, agents=agents, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            run = conversations.start_conversation(
                request.user.pk, form.parsed_agent, form.parsed_message, enqueue=enqueue_runs
            )
        except conversations.NotAdmitted as refusal:
            form.add_error(None, refusal.message)
        else:
            url = reverse("runs:conversation", args=[run.conversation_id])
            return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    context = {"form": form, "agents": agents, "max_chars": conversations.max_message_chars()}
    return render(
        request, "runs/conversation_new.html#form" if request.htmx else "runs/conversation_new.html", context
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def conversation_detail(request: HtmxRequest, pk: int) -> HttpResponse:
    """The page; its tail polls this view while a run is in flight (see the module docstring)."""
    conversation = _mine(request, pk)
    context = _page_context(request, conversation)
    if not request.htmx:
        return render(request, "runs/conversation.html", context)
    response = render(request, "runs/conversation.html#tail", {**context, "oob": True})
    return response if context["thread"].in_flight else HttpResponseStopPolling(response.content)


@owner_post
def send_message(request: HtmxRequest, pk: int) -> HttpResponse:
    conversation = _mine(request, pk)
    form = MessageForm(request.POST)
    if form.is_valid():
        try:
            proposals.confirm_from_message(conversation, request.user, form.parsed_message)
            conversations.send_message(conversation, form.parsed_message, enqueue=enqueue_runs)
        except Conversation.DoesNotExist:
            raise Http404("The conversation was deleted.") from None
        except NOT_CONFIRMED as refusal:
            form.add_error(None, f"Not sent: the proposed schedule was not created. {refusal.message}")
        except REFUSED as refusal:
            form.add_error(None, refusal.message)
        else:
            if not request.htmx:
                return redirect(reverse("runs:conversation", args=[pk]) + "#tail")
            context = _page_context(request, conversation, sent=True)
            return render(request, "runs/conversation.html#sent", context)
    if request.htmx:
        return render(
            request, "runs/conversation.html#composer", _page_context(request, conversation, form=form)
        )
    return render(request, "runs/conversation.html", _page_context(request, conversation, form=form))


@owner_post
def cancel_run(request: HtmxRequest, pk: int) -> HttpResponse:
    """Stop: the run ends `cancelled` (not a failure) and its reservation is released.
    Idempotent: a run that already ended is left as it is, and said so."""
    run = get_object_or_404(Run.objects.owned_by(request.user).select_related("conversation"), pk=pk)
    stopped = services.cancel_run(run)
    notice = (
        "Stopped. A stopped run is not a failure, and its reservation is released."
        if stopped
        else ("It had already ended; nothing was stopped.")
    )
    if request.htmx:
        context = _page_context(request, run.conversation, notice=notice, oob=True)
        return render(request, "runs/conversation.html#tail", context)
    messages.add_message(request, messages.SUCCESS if stopped else messages.INFO, notice)
    return redirect("runs:conversation", pk=run.conversation_id)


def _decided(request: HtmxRequest, proposal: Proposal, notice: str, level: int) -> HttpResponse:
    """HTMX: the proposal's card as it is now, with what happened; otherwise back to it."""
    if request.htmx:
        zone = owner_timezone(request)
        card = proposals.card(Proposal.objects.select_related("agent").get(pk=proposal.pk), zone_name=zone)
        tone = {messages.SUCCESS: "ok", messages.WARNING: "warn"}.get(level, "info")
        context = {"card": card, "owner_tz": zone, "proposal_notice": notice, "notice_tone": tone}
        return render(request, "runs/_proposal.html", context)
    messages.add_message(request, level, notice)
    return redirect(
        reverse("runs:conversation", args=[proposal.conversation_id]) + f"#proposal-{proposal.pk}"
    )


@owner_post
def confirm_proposal(request: HtmxRequest, pk: int) -> HttpResponse:
    """Create the proposed schedule. Idempotent: confirmed already creates nothing more."""
    proposal = get_object_or_404(Proposal.objects.owned_by(request.user), pk=pk)
    try:
        schedule, created = proposals.confirm(proposal.pk, request.user)
    except ObjectDoesNotExist:  # the proposal, or the schedule it created, was deleted meanwhile
        raise Http404("The proposal or its schedule was deleted.") from None
    except UNDECIDED as refusal:
        return _decided(request, proposal, refusal.message, messages.WARNING)
    if created:
        return _decided(
            request, proposal, f"Created “{schedule.title}”: it is on your schedules.", messages.SUCCESS
        )
    return _decided(request, proposal, "It was confirmed already; nothing more was created.", messages.INFO)


@owner_post
def decline_proposal(request: HtmxRequest, pk: int) -> HttpResponse:
    """Decline the proposal: nothing is created. Idempotent."""
    proposal = get_object_or_404(Proposal.objects.owned_by(request.user), pk=pk)
    try:
        proposals.decline(proposal.pk, request.user)
    except Proposal.DoesNotExist:
        raise Http404("The proposal was deleted.") from None
    except UNDECIDED as refusal:
        return _decided(request, proposal, refusal.message, messages.WARNING)
    return _decided(request, proposal, "Declined: nothing was created.", messages.INFO)
