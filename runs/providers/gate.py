"""One gate per provider, base URL and API key, shared by every run in flight in a worker process
(docs/decisions/0005-runs-in-flight.md).

A rate limit is the provider's, not one run's: a 429 (with or without `Retry-After`) holds back
every run of this process that talks to the same provider with the same key until the time it
names, instead of a hundred runs each retrying on its own schedule. And at most
PROVIDER_CONCURRENCY_PER_WORKER requests are open to one provider at once; a run over that waits
for a free slot before it sends anything. A run that waited, for either, is checked again before
it sends (Stop, its deadline): the caller's `waited` callback.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings

# How often a run waiting for a provider slot looks up from the wait (to be stopped, or time out).
SLOT_CHECK_SECONDS = 5.0
SLOT_WAIT_NOTICED = 0.05  # a wait for a slot longer than this is checked again before sending


class Gate:
    def __init__(self, slots: int) -> None:
        self.slots = threading.BoundedSemaphore(slots)
        self.resume_at = 0.0  # time.monotonic(): nothing is sent to the provider before it
        self.lock = threading.Lock()

    def hold(self, seconds: float) -> None:
        """The provider asked for a pause: every run of this process waits it out."""
        with self.lock:
            self.resume_at = max(self.resume_at, time.monotonic() + seconds)


class Passage:
    """One request's way through its gate, over its retries."""

    def __init__(self, gate: Gate, sleep: Callable[[float], None], waited: Callable[[], None]) -> None:
        self.gate, self.sleep, self.waited = gate, sleep, waited
        self.waited_until = 0.0  # the hold this request has already slept out

    def held(self) -> float:
        """Seconds left of a hold this request has not yet waited out (0: none)."""
        resume = self.gate.resume_at
        return resume - time.monotonic() if resume > self.waited_until else 0.0

    def pause(self, seconds: float) -> None:
        """A retry's backoff, or the provider's hold if that ends later: one sleep."""
        self.sleep(max(seconds, self.held()))
        self.waited_until = max(self.waited_until, self.gate.resume_at)

    @contextmanager
    def open(self) -> Iterator[None]:
        """Wait out any hold, then for a slot; hold the slot while the request is on the wire."""
        while True:
            if (left := self.held()) > 0:
                self.sleep(left)
                self.waited_until = self.gate.resume_at
                self.waited()
                continue
            asked = time.monotonic()
            if not self.gate.slots.acquire(timeout=SLOT_CHECK_SECONDS):
                self.waited()
                continue
            if self.held() > 0:  # another run met the limit while this one waited for the slot
                self.gate.slots.release()
                continue
            if time.monotonic() - asked > SLOT_WAIT_NOTICED:
                try:
                    self.waited()  # stopped, or out of time, while it queued for the slot
                except BaseException:
                    self.gate.slots.release()
                    raise
            break
        try:
            yield
        finally:
            self.gate.slots.release()


_gates: dict[tuple[str, str, str], Gate] = {}
_lock = threading.Lock()


def gate_for(provider: str, base_url: str, api_key: str) -> Gate:
    """Rate limits are per key: two agents with keys of their own do not slow each other."""
    key = (provider, base_url.rstrip("/"), hashlib.sha256(api_key.encode()).hexdigest()[:16])
    with _lock:
        gate = _gates.get(key)
        if gate is None:
            gate = _gates[key] = Gate(settings.PROVIDER_CONCURRENCY_PER_WORKER)
        return gate


def forget_inherited_gates() -> None:
    """In a forked child: the parent's gates may be held by threads that do not exist here."""
    global _lock
    _gates.clear()
    _lock = threading.Lock()
