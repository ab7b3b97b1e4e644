"""The owner's channels: email, and a webhook signed with HMAC-SHA256 over the body with the
owner's secret; checked when saved, the secret shown once."""

from __future__ import annotations

import hashlib
import hmac
import secrets

import httpx
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from runs import outbound
from schedules.models import NotificationSettings


class InvalidNotificationSettings(ValueError):
    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        super().__init__("; ".join(fields.values()))


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
