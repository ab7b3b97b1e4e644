from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from schedules.models import Schedule


@login_required
def schedule_list(request: HttpRequest) -> HttpResponse:
    schedules = Schedule.objects.owned_by(request.user).select_related("current_revision", "pause")
    return render(request, "schedules/list.html", {"schedules": schedules})
