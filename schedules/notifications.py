"""Telling the owner when a schedule pauses itself, so a paused briefing is not found days later.

One message per pause, content-free like `schedule.run_accounted`: the title, when and why it
paused in one sentence, the classification of the failed runs that tripped it, the count and
the limit, and a link. Never a prompt, an answer or a provider message. The pause row is the
outbox: once it has committed, the minute `notify` task claims and sends it, on every channel
the owner enabled: email, and a webhook POST signed with HMAC-SHA256 over the body with the
owner's secret. Every attempt is recorded; a failing webhook never affects the schedule or the
other channel.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from accounting.formatting import local_text, money_text
from accounting.models import AccountingEvent, owner_zone
from accounting.selectors import owner_timezone
from runs import outbound
from runs.failures import Diagnostics, Failure
from runs.providers.base import ProviderError
from runs.providers.classify import classify_response, classify_transport_error
from runs.providers.retry import with_retries
from schedules import selectors
from schedules.models import NotificationAttempt, NotificationSettings, PauseEvent, RevisionRequest

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Schedules-Signature"
WEBHOOK_ATTEMPTS = 3
WEBHOOK_TIMEOUT_SECONDS = 5.0
# A webhook that fails permanently this many times in a row is turned off, with a note.
DISABLE_AFTER_PERMANENT_FAILURES = 3
# A claimed notice not marked sent after this long was abandoned (its worker died): reclaim it.
NOTICE_LEASE = timedelta(minutes=5)


class InvalidNotificationSettings(ValueError):
    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        super().__init__("; ".join(fields.values()))


# -- settings -------------------------------------------------------------------------------------


def settings_for(owner_id: int) -> NotificationSettings:
    """The owner's channels, created with the defaults on first use."""
    channels, _ = NotificationSettings.objects.get_or_create(owner_id=owner_id)
    return channels


def check_webhook_url(url: str) -> str:
    """The URL as it will be sent (runs.outbound normalizes it): https, or plain http for
    localhost outside production; never one with credentials in it; in production never one
    that resolves to a private address. Raises InvalidNotificationSettings naming the field."""
    if not url.strip():
        return ""
    if not url.strip().lower().startswith(("https://", "http://")):
        raise InvalidNotificationSettings({"webhook_url": "webhook_url must be an absolute https:// URL"})
    try:
        normalized = outbound.normalize_url(url, field="webhook_url")
    except outbound.UnsafeURL as exc:
        raise InvalidNotificationSettings({"webhook_url": str(exc)}) from None
    parsed = httpx.URL(normalized)
    local = parsed.host in ("localhost", "127.0.0.1", "::1")
    if parsed.scheme == "http" and not (local and not settings.PRODUCTION):
        message = "webhook_url must use https:// (plain http is allowed only for localhost in development)"
        raise InvalidNotificationSettings({"webhook_url": message})
    if not settings.ALLOW_PRIVATE_ADDRESSES and (problem := outbound.host_problem(parsed.host)):
        raise InvalidNotificationSettings({"webhook_url": f"webhook_url {problem}"})
    return normalized


def update_notification_settings(
    owner: AbstractBaseUser, *, email_enabled: bool, webhook_enabled: bool, webhook_url: str
) -> tuple[NotificationSettings, str]:
    """Save the owner's channels; returns them and a new webhook secret if one was just made
    (shown once). Re-enabling or changing the URL clears an automatic disable."""
    assert owner.pk is not None
    url = check_webhook_url(webhook_url)
    if webhook_enabled and not url:
        raise InvalidNotificationSettings({"webhook_url": "webhook_url is required to turn the webhook on"})
    with transaction.atomic():
        current = NotificationSettings.objects.select_for_update().get(pk=settings_for(int(owner.pk)).pk)
        new_secret = ""
        if webhook_enabled and not current.webhook_secret:
            new_secret = current.webhook_secret = _new_secret()
        if url != current.webhook_url or (webhook_enabled and not current.webhook_enabled):
            current.webhook_disabled_at, current.webhook_disabled_reason, current.webhook_failures = (
                None,
                "",
                0,
            )
        current.email_enabled, current.webhook_enabled, current.webhook_url = (
            email_enabled,
            webhook_enabled,
            url,
        )
        current.save()
    return current, new_secret


def rotate_webhook_secret(owner: AbstractBaseUser) -> str:
    """A new signing secret, returned once; the old one stops verifying at once."""
    assert owner.pk is not None
    secret = _new_secret()
    NotificationSettings.objects.filter(pk=settings_for(int(owner.pk)).pk).update(
        webhook_secret=secret, updated_at=timezone.now()
    )
    return secret


def _new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# -- the message ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Notice:
    subject: str
    text: str
    payload: dict[str, Any]


def pause_notice(event: PauseEvent) -> Notice:
    """The content-free message for a pause: built only from the pause record and the
    schedule's accounting events, which carry no prompt, answer or provider message."""
    schedule = event.schedule
    tz = owner_timezone(schedule.owner_id)
    accounted = list(
        AccountingEvent.objects.filter(schedule_id=schedule.pk, created_at__lte=event.created_at).order_by(
            "-created_at", "-id"
        )[: max(event.failures_at_event, 1)]
    )
    sentence = selectors.pause_explanation(schedule, event, accounted, {}, tz)
    tripped = [e for e in accounted if e.failure][: event.failures_at_event]
    failures = [
        {"run_id": e.run_id, "scheduled_for": e.payload.get("scheduled_for"), **(e.failure or {})}
        for e in reversed(tripped)
    ]
    link = settings.SITE_URL + reverse("schedules:detail", args=[schedule.pk])
    lines = [sentence, "", f"Failures counted: {event.failures_at_event} of {event.failure_limit}."]
    zone = zoneinfo.ZoneInfo(tz)
    for accounted_event in reversed(tripped):
        words = Failure.from_payload(accounted_event.failure)
        when = datetime.fromisoformat(accounted_event.payload["scheduled_for"]).astimezone(zone)
        classification = words.long if words else ""
        lines.append(f"- {when:%-d %b %H:%M} {when.tzname()}, run {accounted_event.run_id}: {classification}")
    lines += [
        "",
        "Resuming keeps the count: until a run completes, the next failure pauses it again.",
        f"Open: {link}",
    ]
    payload = {
        "event": "schedule.paused",
        "schedule": {"id": schedule.pk, "title": schedule.title, "url": link},
        "paused_at": event.created_at.isoformat(),
        "reason": event.reason,
        "summary": sentence,
        "detail": event.detail,
        "consecutive_failures": event.failures_at_event,
        "max_consecutive_failures": event.failure_limit,
        "failures": failures,
        "test": False,
    }
    return Notice(subject=f"Paused: {schedule.title}", text="\n".join(lines), payload=payload)


def test_notice(owner_id: int) -> Notice:
    link = settings.SITE_URL + reverse("schedules:list")
    payload = {
        "event": "schedule.paused",
        "schedule": {"id": None, "title": "Test notification", "url": link},
        "paused_at": timezone.now().isoformat(),
        "reason": "test",
        "summary": "This is a test: your notifications reach you. No schedule was paused.",
        "detail": "",
        "consecutive_failures": 0,
        "max_consecutive_failures": 0,
        "failures": [],
        "test": True,
    }
    return Notice(subject="Test notification", text=f"{payload['summary']}\n\nOpen: {link}", payload=payload)


# -- delivery -------------------------------------------------------------------------------------


def deliver_pending_notices(
    *,
    now: datetime | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    limit: int = 100,
) -> list[NotificationAttempt]:
    """The outbox (healthchecks' flips): every self-pause whose notice has not gone out is
    claimed with a conditional update, sent on each channel, then marked notified.

    Safe from several workers at once: only the claim's winner sends. A worker that dies after
    committing a pause loses nothing (the row waits here), and one that dies mid-delivery leaves
    a claim that expires after NOTICE_LEASE, when the next run sends on the channels that have
    no final attempt yet: each channel gets one notice. Returns the attempts made.
    """
    unsent = PauseEvent.objects.filter(
        action=PauseEvent.Action.PAUSE, reason__in=PauseEvent.SELF_PAUSES, notified_at__isnull=True
    )
    return drain_outbox(
        unsent, lambda pk: deliver_pause_notice(pk, client=client, sleep=sleep), now=now, limit=limit
    )


def drain_outbox(
    unsent: QuerySet[Any],
    deliver: Callable[[int], list[NotificationAttempt]],
    *,
    now: datetime | None = None,
    limit: int = 100,
) -> list[NotificationAttempt]:
    """Claim each unsent row (`notified_at` null) whose claim is absent or older than
    NOTICE_LEASE with a conditional update, deliver it, and mark it sent if the claim is still
    ours. Each claim is stamped when it is made, not when the batch began: a batch slowed by
    webhook retries must not hand out claims that have already lapsed. `now` fixes the clock (for
    tests). Returns the attempts made."""

    def clock() -> datetime:
        return now or timezone.now()

    def claimable(at: datetime) -> QuerySet[Any]:
        return unsent.filter(Q(notify_claimed_at__isnull=True) | Q(notify_claimed_at__lt=at - NOTICE_LEASE))

    made: list[NotificationAttempt] = []
    for row_id in list(claimable(clock()).order_by("id").values_list("id", flat=True)[:limit]):
        claimed_at = clock()
        if claimable(claimed_at).filter(pk=row_id).update(notify_claimed_at=claimed_at) != 1:
            continue  # another worker has it
        made += deliver(row_id)
        unsent.model.objects.filter(pk=row_id, notify_claimed_at=claimed_at).update(
            notified_at=timezone.now()
        )
    return made


def deliver_pause_notice(
    pause_event_id: int, *, client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep
) -> list[NotificationAttempt]:
    """Send one pause's notice on each enabled channel that has no final attempt for it yet
    (delivered, failed or skipped; a crash between retries leaves only `retrying` ones)."""
    event = PauseEvent.objects.select_related("schedule", "schedule__owner").filter(pk=pause_event_id).first()
    if event is None or not event.needs_notice:
        return []
    notice = pause_notice(event)
    done = set(
        NotificationAttempt.objects.filter(pause_event=event)
        .exclude(outcome=NotificationAttempt.Outcome.RETRYING)
        .values_list("channel", flat=True)
    )
    return _deliver(event.schedule.owner, notice, event=event, skip=done, client=client, sleep=sleep)


def send_test_notification(
    owner: AbstractBaseUser,
    *,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    attempts: int = WEBHOOK_ATTEMPTS,
) -> list[NotificationAttempt]:
    """A sample notice on every enabled channel, recorded like a real one. The settings page
    sends it with one attempt, so the owner sees the answer within the timeout."""
    assert owner.pk is not None
    notice = test_notice(int(owner.pk))
    return _deliver(owner, notice, event=None, skip=set(), client=client, sleep=sleep, attempts=attempts)


def _deliver(
    owner: Any,
    notice: Notice,
    *,
    event: PauseEvent | None,
    skip: set[str],
    client: httpx.Client | None,
    sleep: Callable[[float], None],
    attempts: int = WEBHOOK_ATTEMPTS,
) -> list[NotificationAttempt]:
    channels = settings_for(owner.pk)
    made: list[NotificationAttempt] = []
    record = (
        recorder(owner.pk, event.schedule_id, made, pause_event=event)
        if event
        else recorder(owner.pk, None, made)
    )
    if channels.email_enabled and NotificationAttempt.Channel.EMAIL not in skip:
        send_email(owner, notice, record)
    if channels.webhook_active and NotificationAttempt.Channel.WEBHOOK not in skip:
        own = client is None
        http = client or outbound.client(timeout=WEBHOOK_TIMEOUT_SECONDS)
        try:
            send_webhook(channels, notice, http, record, sleep, attempts)
        finally:
            if own:
                http.close()
    return made


Record = Callable[..., NotificationAttempt]


def recorder(
    owner_id: int, schedule_id: int | None, made: list[NotificationAttempt], **notice: Any
) -> Record:
    """Records every attempt of one notice, content-free, against the row it is about
    (`pause_event=`, `revision_request=` or `completion_notice=`; none: a test notice)."""

    def record(
        channel: str, outcome: str, *, attempt: int = 1, status: int | None = None, detail: str = ""
    ) -> NotificationAttempt:
        row = NotificationAttempt.objects.create(
            owner_id=owner_id,
            schedule_id=schedule_id,
            channel=channel,
            attempt=attempt,
            outcome=outcome,
            http_status=status,
            detail=detail[:300],
            is_test=not notice,
            created_at=timezone.now(),
            **notice,
        )
        made.append(row)
        return row

    return record


def send_email(owner: Any, notice: Notice, record: Record) -> None:
    channel = NotificationAttempt.Channel.EMAIL
    if not owner.email:
        record(channel, NotificationAttempt.Outcome.SKIPPED, detail="no email address on the account")
        return
    try:
        send_mail(notice.subject, notice.text, settings.DEFAULT_FROM_EMAIL, [owner.email])
    except Exception as exc:  # SMTP errors vary; the attempt records the class, never the message
        logger.warning("pause email to owner %s failed: %s", owner.pk, type(exc).__name__)
        record(channel, NotificationAttempt.Outcome.FAILED, detail=f"sending failed ({type(exc).__name__})")
        return
    record(channel, NotificationAttempt.Outcome.DELIVERED, detail=f"sent to {owner.email}")


def send_webhook(
    channels: NotificationSettings,
    notice: Notice,
    http: httpx.Client,
    record: Record,
    sleep: Callable[[float], None],
    attempts: int,
) -> None:
    """POST with the provider calls' retry policy (runs.providers.retry): transient failures (no
    response, 408, 409, 429, 5xx) are retried with jittered backoff honouring Retry-After; a
    permanent one (410, other 4xx, a Retry-After past the cap) is not."""
    channel = NotificationAttempt.Channel.WEBHOOK
    body = json.dumps(notice.payload, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "agent-schedules-webhook/1",
        "X-Schedules-Event": str(notice.payload["event"]),
        "X-Schedules-Delivery": str(uuid.uuid4()),
        SIGNATURE_HEADER: sign(channels.webhook_secret, body),
    }
    try:
        url = httpx.URL(outbound.normalize_url(channels.webhook_url, field="the webhook URL"))
    except outbound.UnsafeURL as exc:  # saved before URLs were normalized at save
        record(channel, NotificationAttempt.Outcome.FAILED, detail=f"permanent: {exc}")
        _count_permanent_failure(channels, None)
        return
    # Checked again for a clear reason (DNS can change since the save); the connection itself is
    # made only to the address its own check passed (runs.outbound), whatever DNS says next.
    if not settings.ALLOW_PRIVATE_ADDRESSES and (problem := outbound.host_problem(url.host)):
        record(channel, NotificationAttempt.Outcome.FAILED, detail=f"permanent: the webhook URL {problem}")
        _count_permanent_failure(channels, None)
        return
    tries = 0

    def post() -> httpx.Response:
        nonlocal tries
        tries += 1
        try:
            response = http.post(url, content=body, headers=headers, timeout=WEBHOOK_TIMEOUT_SECONDS)
        except httpx.TransportError as exc:
            raise classify_transport_error("webhook", exc) from None
        except Exception as exc:  # anything else is a failed attempt, recorded, never a crash
            raise ProviderError(
                transient=False,
                message=f"the request could not be sent ({type(exc).__name__})",
                diagnostics=Diagnostics(provider="webhook"),
            ) from None
        if 200 <= response.status_code < 300:
            return response
        raise classify_response("webhook", response.status_code, response.headers, None, code_from="code")

    def failed(error: ProviderError, attempt: int, final: bool) -> None:
        outcome = NotificationAttempt.Outcome.FAILED if final else NotificationAttempt.Outcome.RETRYING
        kind = "transient" if error.transient else "permanent"
        status = error.diagnostics.http_status
        record(channel, outcome, attempt=attempt + 1, status=status, detail=f"{kind}: {error.message}")

    try:
        response = with_retries(post, retries=attempts - 1, sleep=sleep, on_error=failed)
    except ProviderError as error:
        if not error.transient:
            _count_permanent_failure(channels, error.diagnostics.http_status)
        return
    record(channel, NotificationAttempt.Outcome.DELIVERED, attempt=tries, status=response.status_code)
    NotificationSettings.objects.filter(pk=channels.pk).update(webhook_failures=0)


def _count_permanent_failure(channels: NotificationSettings, status: int | None) -> None:
    with transaction.atomic():
        current = NotificationSettings.objects.select_for_update().get(pk=channels.pk)
        current.webhook_failures += 1
        if (
            current.webhook_failures >= DISABLE_AFTER_PERMANENT_FAILURES
            and current.webhook_disabled_at is None
        ):
            current.webhook_disabled_at = timezone.now()
            current.webhook_disabled_reason = (
                f"Turned off after {current.webhook_failures} permanent failures in a row "
                f"(last: HTTP {status or 'no response'}). Check the URL, then save to turn it back on."
            )
        current.save()


# -- decisions on revision requests --------------------------------------------------------------
# The owner is told when an admin pins or declines their request for new limits, on the same
# channels as a pause notice. A decided request is its own outbox row (`notified_at`), delivered
# by the same minute task, once per channel, each attempt recorded.


def decision_notice(request: RevisionRequest) -> Notice:
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
    return Notice(subject=subject, text="\n".join(lines), payload=payload)


def deliver_pending_decision_notices(
    *,
    now: datetime | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    limit: int = 100,
) -> list[NotificationAttempt]:
    """The decision outbox, claimed like the pause notices' (see deliver_pending_notices): only
    the claim's winner sends, a lapsed claim is taken over after NOTICE_LEASE, and each channel
    is sent once. Returns the attempts made."""
    return drain_outbox(
        RevisionRequest.objects.undelivered(),
        lambda pk: deliver_decision_notice(pk, client=client, sleep=sleep),
        now=now,
        limit=limit,
    )


def deliver_decision_notice(
    request_id: int, *, client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep
) -> list[NotificationAttempt]:
    """Send one decided request's notice on each enabled channel without a final attempt yet."""
    request = (
        RevisionRequest.objects.select_related("schedule__owner", "revision", "decided_by")
        .filter(pk=request_id)
        .exclude(state=RevisionRequest.State.OPEN)
        .first()
    )
    if request is None:
        return []
    owner = request.schedule.owner
    notice = decision_notice(request)
    done = set(
        NotificationAttempt.objects.filter(revision_request=request)
        .exclude(outcome=NotificationAttempt.Outcome.RETRYING)
        .values_list("channel", flat=True)
    )
    channels = settings_for(owner.pk)
    made: list[NotificationAttempt] = []
    record = recorder(owner.pk, request.schedule_id, made, revision_request=request)

    if channels.email_enabled and NotificationAttempt.Channel.EMAIL not in done:
        send_email(owner, notice, record)
    if channels.webhook_active and NotificationAttempt.Channel.WEBHOOK not in done:
        http = client or outbound.client(timeout=WEBHOOK_TIMEOUT_SECONDS)
        try:
            send_webhook(channels, notice, http, record, sleep, WEBHOOK_ATTEMPTS)
        finally:
            if client is None:
                http.close()
    return made
