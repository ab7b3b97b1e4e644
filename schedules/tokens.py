"""API tokens: created with the secret shown once, stored as a SHA-256 hash, revocable."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.utils import timezone

from schedules.models import ApiToken

PREFIX = "sat_"
SCOPES = tuple(ApiToken.Scope.values)


class InvalidScopes(ValueError):
    pass


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_api_token(user: User, *, name: str, scopes: list[str]) -> tuple[ApiToken, str]:
    """A new token and its secret, which is never stored and cannot be shown again."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise InvalidScopes(
            f"scopes must be a non-empty list of {', '.join(SCOPES)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    secret = PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100] or "API token",
        prefix=secret[: len(PREFIX) + 6],
        token_hash=hash_secret(secret),
        scopes=sorted(set(scopes), key=SCOPES.index),
    )
    return token, secret


def authenticate(secret: str) -> ApiToken | None:
    """The active token for a presented secret, or None. Records when it was last used."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_secret(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)  # at most once a minute
    return token


def revoke_api_token(token: ApiToken) -> bool:
    """Idempotent: True only for the call that revoked it."""
    return (
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) == 1
    )
