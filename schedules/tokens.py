"""API tokens: created with the secret shown once, stored as a SHA-256 hash, revocable."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.utils import timezone

from schedules.models import ApiToken

PREFIX = "sat_"
SCOPES = tuple(ApiToken.Scope.values)


PIN_PERMISSION = "schedules.pin_revision"


class InvalidScopes(ValueError):
    """Scopes that are unknown, or that the token's user does not hold."""


class NotYours(PermissionError):
    """A token for someone else: only a superuser may create one."""


def check_token_request(user: User, scopes: list[str], *, by: User | None) -> None:
    """Raises InvalidScopes or NotYours if `by` may not give `user` a token with `scopes`."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise InvalidScopes(
            f"scopes must be a non-empty list of {', '.join(SCOPES)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    if by is not None and by.pk != user.pk and not by.is_superuser:
        raise NotYours(f"Only a superuser may create a token for another user ({user.get_username()}).")
    if ApiToken.Scope.PIN_REVISION in scopes and not user.has_perm(PIN_PERMISSION):
        raise InvalidScopes(
            f"{user.get_username()} lacks the pin permission, so a token of theirs cannot have the "
            "pin_revision scope"
        )


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_api_token(user: User, *, name: str, scopes: list[str], by: User | None) -> tuple[ApiToken, str]:
    """A new token and its secret, which is never stored and cannot be shown again.

    A token is made for yourself, with scopes you hold (`pin_revision` needs the pin permission);
    one for another user needs a superuser (`by`). `by=None` is the operator at the command line,
    who may make one for anyone, still only with scopes that user holds.
    """
    check_token_request(user, scopes, by=by)
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
