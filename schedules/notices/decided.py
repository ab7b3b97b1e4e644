"""An admin pinned or declined the owner's request for new limits: the owner is told what was
decided, by whom, the limits now in force or the admin's reason, and a link. Never a prompt, an
answer or a provider message. To the owner, on the channels they hear pauses on."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from accounting.formatting import local_text, money_text
from accounting.selectors import owner_timezone
from accounting.timezones import owner_zone
from schedules.models import Notice, NotificationSettings, RevisionRequest
from schedules.notices.message import Message


def queue(request: RevisionRequest) -> Notice:
    """In the decision's transaction."""
    return Notice.objects.create(
        kind=Notice.Kind.DECIDED,
        owner_id=request.schedule.owner_id,
        schedule_id=request.schedule_id,
        revision_request=request,
        created_at=timezone.now(),
    )


def channels(owner: NotificationSettings) -> tuple[bool, bool]:
    """(email, webhook)."""
    return owner.email_enabled, owner.webhook_active


def message(row: Notice, owner: NotificationSettings) -> Message:
    assert row.revision_request_id is not None  # a decided notice names its request
    request = RevisionRequest.objects.select_related("schedule__owner", "revision", "decided_by").get(
        pk=row.revision_request_id
    )
    return decision_notice(request)


def decision_notice(request: RevisionRequest) -> Message:
    """The message for a decided request: what was decided, by whom, the limits now in force or
    the admin's reason, and a link. Never a prompt, an answer or a provider message."""
    schedule = request.schedule
    zone = owner_zone(owner_timezone(schedule.owner_id))
    link = settings.SITE_URL + reverse("schedules:detail", args=[schedule.pk])
    asked = local_text(request.created_at, zone)
    decided_at = request.decided_at or timezone.now()
    who = request.decided_by.get_username() if request.decided_by else "an admin"
    pinned = request.state == RevisionRequest.State.PINNED and request.revision is not None
    if pinned:
        assert request.revision is not None
        limits = request.revision.run_limits
        subject = f"New limits pinned: {schedule.title}"
        lines = [
            f"Your request of {asked} for new limits on “{schedule.title}” was pinned by {who} "
            f"on {local_text(decided_at, zone)} as revision {request.revision.number}.",
            "",
            f"Cost per run: {money_text(limits.max_cost)} (synthesis reserve "
            f"{money_text(limits.synthesis_reserve_cost)}); steps {limits.max_steps}, model calls "
            f"{limits.max_model_calls}, tool calls {limits.max_tool_calls}; a failure limit of "
            f"{request.revision.max_consecutive_failures}.",
            f"Reason: {request.revision.reason}",
            "",
            "Runs that start from now on use these limits.",
        ]
        if schedule.status == schedule.Status.PAUSED:
            lines.append("The schedule is still paused: resume it when you are ready.")
    else:
        subject = f"Limits request declined: {schedule.title}"
        lines = [
            f"Your request of {asked} for new limits on “{schedule.title}” was declined by {who} "
            f"on {local_text(decided_at, zone)}.",
            "",
            f"Reason: {request.decline_reason}",
            "",
            "The limits in force stay as they are.",
        ]
    lines += ["", f"Open: {link}"]
    payload = {
        "event": "schedule.revision_request_decided",
        "schedule": {"id": schedule.pk, "title": schedule.title, "url": link},
        "request": {
            "id": request.pk,
            "state": request.state,
            "requested_at": request.created_at.isoformat(),
            "decided_at": decided_at.isoformat(),
            "decided_by": who,
            "decline_reason": request.decline_reason or None,
        },
        "revision": request.revision.number if pinned and request.revision else None,
        "test": False,
    }
    return Message(subject=subject, text="\n".join(lines), payload=payload)
