"""The one delivery path of every notice: claim it from the outbox (the Notice table), send it on
each of its channels once, record every attempt, mark it sent.

Safe from several workers at once: a notice is claimed with a conditional update, and only the
claim's winner sends. A worker that dies after committing what a notice tells loses nothing (the
row waits), and one that dies mid-delivery leaves a claim that lapses after NOTICE_LEASE, when
the next run sends on the channels that have no final attempt yet: each channel gets one notice.
Webhooks are retried with the provider calls' policy (runs.providers.retry); a failing webhook
never affects the schedule or the other channel, and one failing permanently three times in a
row is turned off with a note.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from runs import outbound
from runs.failures import Diagnostics
from runs.providers.base import ProviderError
from runs.providers.classify import classify_response, classify_transport_error
from runs.providers.retry import with_retries
from schedules.models import Notice, NotificationAttempt, NotificationSettings
from schedules.notices import budget, capped, completed, decided, paused
from schedules.notices.channels import settings_for, sign
from schedules.notices.message import Message

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Schedules-Signature"
WEBHOOK_ATTEMPTS = 3
WEBHOOK_TIMEOUT_SECONDS = 5.0
# A webhook that fails permanently this many times in a row is turned off, with a note.
DISABLE_AFTER_PERMANENT_FAILURES = 3
# A claimed notice not marked sent after this long was abandoned (its worker died): reclaim it.
NOTICE_LEASE = timedelta(minutes=5)
# What each kind of notice says and on which channels (a module each).
KINDS: dict[str, ModuleType] = {
    Notice.Kind.PAUSED: paused,
    Notice.Kind.DECIDED: decided,
    Notice.Kind.COMPLETED: completed,
    Notice.Kind.BUDGET: budget,
    Notice.Kind.MONTHLY_CAP: capped,
}

Record = Callable[..., NotificationAttempt]


def deliver_pending(
    *kinds: str,
    now: datetime | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    limit: int = 100,
) -> list[NotificationAttempt]:
    """Every committed notice not yet sent (of these kinds; all without), each sent on its
    channels and marked sent. Returns the attempts made."""
    unsent = Notice.objects.filter(notified_at__isnull=True)
    if kinds:
        unsent = unsent.filter(kind__in=kinds)
    return drain_outbox(unsent, lambda pk: deliver(pk, client=client, sleep=sleep), now=now, limit=limit)


def drain_outbox(
    unsent: QuerySet[Any],
    deliver_one: Callable[[int], list[NotificationAttempt]],
    *,
    now: datetime | None = None,
    limit: int = 100,
) -> list[NotificationAttempt]:
    """Claim each unsent row whose claim is absent or older than NOTICE_LEASE with a conditional
    update, deliver it, and mark it sent if the claim is still ours. Each claim is stamped when it
    is made, not when the batch began: a batch slowed by webhook retries must not hand out claims
    that have already lapsed. `now` fixes the clock (for tests)."""

    def clock() -> datetime:
        return now or timezone.now()

    def claimable(at: datetime) -> QuerySet[Any]:
        return unsent.filter(Q(notify_claimed_at__isnull=True) | Q(notify_claimed_at__lt=at - NOTICE_LEASE))

    made: list[NotificationAttempt] = []
    for row_id in list(claimable(clock()).order_by("id").values_list("id", flat=True)[:limit]):
        claimed_at = clock()
        if claimable(claimed_at).filter(pk=row_id).update(notify_claimed_at=claimed_at) != 1:
            continue  # another worker has it
        made += deliver_one(row_id)
        unsent.model.objects.filter(pk=row_id, notify_claimed_at=claimed_at).update(
            notified_at=timezone.now()
        )
    return made


def deliver(
    notice_id: int, *, client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep
) -> list[NotificationAttempt]:
    """Send one notice on each of its channels that has no final attempt for it yet (delivered,
    failed or skipped; a crash between retries leaves only `retrying` ones)."""
    row = (
        Notice.objects.select_related(
            "owner", "schedule", "pause_event__schedule", "occurrence__revision", "budget_alert"
        )
        .filter(pk=notice_id)
        .first()
    )
    if row is None:
        return []
    kind = KINDS[row.kind]
    owner = settings_for(row.owner_id)
    email, webhook = kind.channels(owner)
    done = set(
        NotificationAttempt.objects.filter(notice=row)
        .exclude(outcome=NotificationAttempt.Outcome.RETRYING)
        .values_list("channel", flat=True)
    )
    made: list[NotificationAttempt] = []
    record = recorder(
        row.owner_id,
        row.schedule_id,
        made,
        notice=row,
        pause_event_id=row.pause_event_id,
        revision_request_id=row.revision_request_id,
    )
    message = kind.message(row, owner)
    send(
        row.owner,
        owner,
        message,
        record,
        email=email and NotificationAttempt.Channel.EMAIL not in done,
        webhook=webhook and NotificationAttempt.Channel.WEBHOOK not in done,
        client=client,
        sleep=sleep,
    )
    return made


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
    channels = settings_for(int(owner.pk))
    made: list[NotificationAttempt] = []
    send(
        owner,
        channels,
        paused.test_notice(int(owner.pk)),
        recorder(int(owner.pk), None, made),
        email=channels.email_enabled,
        webhook=channels.webhook_active,
        client=client,
        sleep=sleep,
        attempts=attempts,
    )
    return made


def send(
    owner: Any,
    channels: NotificationSettings,
    message: Message,
    record: Record,
    *,
    email: bool,
    webhook: bool,
    client: httpx.Client | None,
    sleep: Callable[[float], None],
    attempts: int = WEBHOOK_ATTEMPTS,
) -> None:
    if email:
        send_email(owner, message, record)
    if webhook:
        http = client or outbound.client(timeout=WEBHOOK_TIMEOUT_SECONDS)
        try:
            send_webhook(channels, message, http, record, sleep, attempts)
        finally:
            if client is None:
                http.close()


def recorder(owner_id: int, schedule_id: int | None, made: list[NotificationAttempt], **about: Any) -> Record:
    """Records every attempt of one notice, content-free (`notice=` and what it is about; none: a
    test notice)."""

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
            is_test=not about,
            created_at=timezone.now(),
            **about,
        )
        made.append(row)
        return row

    return record


def send_email(owner: Any, message: Message, record: Record) -> None:
    channel = NotificationAttempt.Channel.EMAIL
    if not owner.email:
        record(channel, NotificationAttempt.Outcome.SKIPPED, detail="no email address on the account")
        return
    try:
        send_mail(message.subject, message.text, settings.DEFAULT_FROM_EMAIL, [owner.email])
    except Exception as exc:  # SMTP errors vary; the attempt records the class, never the message
        logger.warning("pause email to owner %s failed: %s", owner.pk, type(exc).__name__)
        record(channel, NotificationAttempt.Outcome.FAILED, detail=f"sending failed ({type(exc).__name__})")
        return
    record(channel, NotificationAttempt.Outcome.DELIVERED, detail=f"sent to {owner.email}")


def send_webhook(
    channels: NotificationSettings,
    message: Message,
    http: httpx.Client,
    record: Record,
    sleep: Callable[[float], None],
    attempts: int,
) -> None:
    """POST with the provider calls' retry policy (runs.providers.retry): transient failures (no
    response, 408, 409, 429, 5xx) are retried with jittered backoff honouring Retry-After; a
    permanent one (410, other 4xx, a Retry-After past the cap) is not."""
    channel = NotificationAttempt.Channel.WEBHOOK
    body = json.dumps(message.payload, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "agent-schedules-webhook/1",
        "X-Schedules-Event": str(message.payload["event"]),
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
