"""The retry policy for HTTP calls that are classified like provider calls: a model request in a
run, and a webhook delivery of a notification. Transient errors are retried a bounded number of
times with capped exponential backoff and full jitter; a `Retry-After` (already under the cap,
or the error would be permanent) is honoured as a floor."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings

from runs.providers.base import ProviderError
from runs.providers.classify import RETRY_AFTER_CAP_SECONDS

T = TypeVar("T")


def backoff_delay(attempt: int, retry_after: float | None, *, rng: random.Random | None = None) -> float:
    """Capped exponential backoff with full jitter; a Retry-After is a floor, capped too."""
    base = settings.PROVIDER_BACKOFF_BASE_SECONDS * (2**attempt)
    jittered = (rng or random).uniform(0, min(settings.PROVIDER_BACKOFF_CAP_SECONDS, base))
    if retry_after is not None:
        return min(max(retry_after, jittered), RETRY_AFTER_CAP_SECONDS)
    return jittered


def with_retries(
    call: Callable[[], T],
    *,
    retries: int,
    sleep: Callable[[float], None] = time.sleep,
    before_attempt: Callable[[int], None] | None = None,
    on_error: Callable[[ProviderError, int, bool], None] | None = None,
    final: Callable[[ProviderError], bool] | None = None,
) -> T:
    """`call()`, retried up to `retries` more times while it raises a transient ProviderError.

    Raises the first permanent error, or the last transient one once retries are spent.
    `before_attempt(n)` runs before attempt n (0-based; the run loop checks for cancellation
    there); `on_error(error, n, final)` sees every failed attempt (webhooks record each one);
    `final(error)` says an error ends the retries whatever its class (a cut call, which the run
    loop charges before it tries again).
    """
    attempt = 0
    while True:
        if before_attempt is not None:
            before_attempt(attempt)
        try:
            return call()
        except ProviderError as error:
            last = not error.transient or attempt >= retries or (final is not None and final(error))
            if on_error is not None:
                on_error(error, attempt, last)
            if last:
                raise
            sleep(backoff_delay(attempt, error.retry_after))
            attempt += 1
