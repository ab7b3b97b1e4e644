"""The owner's request for new limits (docs/contract.md#conversations): owners cannot change limits
(docs/decisions/0002 decision 4), so the page prefills a request from the recent runs' usage, shows what
the proposed limits would have done to those runs, and sends it to the admins, who decide."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from accounting.selectors import owner_timezone
from config.http import HtmxRequest
from schedules import selectors, services
from schedules.forms import RevisionRequestForm
from schedules.models import Schedule
from schedules.views.schedules import owned_schedule


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def request_limits(request: HtmxRequest, pk: int) -> HttpResponse:
    schedule = owned_schedule(request, pk)
    back = reverse("schedules:detail", args=[pk]) + "#requests"
    if schedule.status == Schedule.Status.COMPLETED:
        messages.info(request, "A completed schedule runs no more, so it needs no new limits.")
        return redirect(back)
    page = selectors.request_page(schedule)
    # "check": replay the values typed, send nothing (the live check, and its no-JavaScript button).
    # The page posts it, so a long reason never makes an address longer than a server takes.
    sent = request.POST if request.method == "POST" else request.GET
    checking = "check" in sent
    data = sent if request.method == "POST" or checking else None
    form = RevisionRequestForm(data, current=schedule.revision, initial=page.initial)
    if request.method == "POST" and not checking and form.is_valid():
        try:
            services.request_revision(schedule, form.parsed, by=request.user, via="dashboard")
        except services.RequestAlreadyOpen:
            messages.info(request, "You already have an open request for this schedule; nothing was sent.")
        except services.ScheduleCompleted:
            messages.info(request, "The schedule completed meanwhile; nothing was sent.")
        else:
            messages.success(request, "Request sent. An admin decides; you are told when they do.")
        return redirect(back)
    typed = form.checked_limits()
    if checking:
        form.errors.pop("reason", None)  # a check is not a send: only the limits matter here
    context = {
        "page": page,
        "form": form,
        "limits_invalid": form.is_bound and typed is None,
        "report": selectors.replay_report(page.runs, typed or page.suggestion.limits),
        "owner_tz": owner_timezone(request),
    }
    cap = form.typed_cap() if form.is_bound else schedule.revision.monthly_cap
    max_cost = (typed or page.suggestion.limits).max_cost
    context["cap"] = cap
    context["cap_months"] = selectors.cap_replay(schedule, cap, max_cost, owner_timezone(request))
    partial = request.htmx and checking
    return render(request, "schedules/request.html#replay" if partial else "schedules/request.html", context)
