"""Bearer-token authentication, scopes and the per-token rate limit.

A token acts as its user, limited by its scopes. The order of checks is fixed: who you are (401),
how fast you are going (429), then what this token may do (403).
"""

from __future__ import annotations

import math
import time
from typing import cast

from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.http import HttpRequest
from ninja.security import HttpBearer

from schedules import tokens
from schedules.api.errors import ApiError
from schedules.models import ApiToken

RATE_WINDOW_SECONDS = 60


class BearerToken(HttpBearer):
    """`Authorization: Bearer <token>` for one scope. Every check raises ApiError, so each
    refusal has its own code instead of ninja's generic 401."""

    openapi_description = (
        "An API token created with `manage.py create_api_token USER --scopes read,write` or in the "
        "admin, sent as `Authorization: Bearer <token>`. Scopes: `read` (GET), `write` (create, "
        "edit, pause, resume, delete), `pin_revision` (explicit revisions; the user also needs "
        "the pin permission)."
    )
    openapi_bearerFormat = "opaque token (sat_…)"

    def __init__(self, scope: str) -> None:
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest) -> ApiToken:
        value = request.headers.get(self.header, "")
        if not value.strip():
            raise ApiError(401, "not_authenticated", "Send an API token: Authorization: Bearer <token>.")
        scheme, _, secret = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise ApiError(401, "invalid_token", "The Authorization header must be 'Bearer <token>'.")
        return self.authenticate(request, secret.strip())

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken:
        found = tokens.authenticate(token)
        if found is None:
            raise ApiError(401, "invalid_token", "This token is not valid, or it has been revoked.")
        check_rate(found)
        if not found.has_scope(self.scope):
            raise ApiError(
                403,
                "missing_scope",
                f"This token lacks the {self.scope} scope; create a token with --scopes {self.scope}.",
            )
        return found


def check_rate(token: ApiToken) -> None:
    """At most API_RATE_LIMIT_PER_MINUTE requests per token per clock minute, else 429.

    Counted in Django's cache with add + incr, which are atomic under concurrent threads in the
    local-memory, Redis and Memcached backends. With the default local-memory cache the count
    is per process: N web processes allow up to N times the limit. Configure a shared cache
    (Redis, Memcached) for one limit across processes.
    """
    limit = settings.API_RATE_LIMIT_PER_MINUTE
    now = time.time()
    window = int(now // RATE_WINDOW_SECONDS)
    key = f"api-rate:{token.pk}:{window}"
    cache.add(key, 0, timeout=RATE_WINDOW_SECONDS * 2)
    try:
        count = cache.incr(key)
    except ValueError:  # evicted between add and incr: this request starts the count again
        cache.set(key, 1, timeout=RATE_WINDOW_SECONDS * 2)
        count = 1
    if count > limit:
        retry_after = max(1, math.ceil((window + 1) * RATE_WINDOW_SECONDS - now))
        raise ApiError(
            429,
            "rate_limited",
            f"Too many requests: this token may make {limit} per minute. Retry in {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )


def token_of(request: HttpRequest) -> ApiToken:
    return cast(ApiToken, getattr(request, "auth"))  # noqa: B009 (set by ninja after authentication)


def user_of(request: HttpRequest) -> User:
    return token_of(request).user


READ = BearerToken(ApiToken.Scope.READ)
WRITE = BearerToken(ApiToken.Scope.WRITE)
PIN = BearerToken(ApiToken.Scope.PIN_REVISION)
