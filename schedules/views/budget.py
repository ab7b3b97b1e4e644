"""The budget page: spend against the ceilings, open reservations, 30 days of daily spend."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_GET

from accounting import alerts, selectors
from accounting.models import Reservation
from accounting.selectors import owner_timezone, request_alerts, request_budget, request_summary
from config.http import HtmxRequest
from schedules import forecast
from schedules.models import Schedule


@require_GET
@login_required
def budget(request: HtmxRequest) -> HttpResponse:
    """Spend against the ceilings, the month's forecast and alert thresholds, open reservations, and 30
    days of daily spend by schedule as a server-rendered SVG chart. The summary is the top bar's,
    computed once for the request."""
    tz = owner_timezone(request)
    summary = SimpleLazyObject(lambda: request_summary(request))
    chart = selectors.daily_spend(request.user.pk, tz)
    keys = [s.key for s in chart.series if s.key > 0]
    titles = dict(Schedule.objects.owned_by(request.user).filter(pk__in=keys).values_list("pk", "title"))
    names = {s.key: _series_name(s.key, titles) for s in chart.series}
    reservations: list[Reservation] = selectors.open_reservations(request.user.pk)
    context = {
        "budget": summary,
        "month": selectors.month_usage(request.user.pk, tz),
        "chart": chart,
        "names": names,
        "reservations": reservations,
        "owner_tz": tz,
        "forecast": forecast.month_forecast(
            request.user.pk, budget=request_budget(request), summary=request_summary(request), table=True
        ),
        "thresholds": alerts.thresholds_of(request_budget(request)),
        "crossed": request_alerts(request),
    }
    return render(request, "accounting/budget.html", context)


def _series_name(key: int, titles: dict[int, str]) -> str:
    if key == selectors.INTERACTIVE:
        return "Interactive runs"
    if key == selectors.OTHER:
        return "Other schedules"
    return titles.get(key, f"Deleted schedule #{key}")
