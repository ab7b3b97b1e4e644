"""One gate per provider and base URL, shared by every run in flight in a worker process
(docs/decisions/0005-runs-in-flight.md).

A rate limit is the provider's, not one run's: a 429 (with or without `Retry-After`) holds back
every run of this process that talks to the same provider and base URL until the time it names,
instead of a hundred runs each retrying on its own schedule. And at most
PROVIDER_CONCURRENCY_PER_WORKER requests are open to one provider at once; a run over that waits
for a free slot before it sends anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings


class Gate:
    def __init__(self, key: tuple[str, str], slots: int) -> None:
        self.key = key
        self.slots = threading.BoundedSemaphore(slots)
        self.resume_at = 0.0  # time.monotonic(): nothing is sent to the provider before it
        self.lock = threading.Lock()

    def hold(self, seconds: float) -> None:
        """The provider asked for a pause: every run of this process waits it out."""
        with self.lock:
            self.resume_at = max(self.resume_at, time.monotonic() + seconds)

    def wait(self, sleep: Callable[[float], None]) -> float:
        """Sleep until the provider accepts requests again; the seconds waited (0: not held)."""
        left = self.resume_at - time.monotonic()
        if left <= 0:
            return 0.0
        sleep(left)
        return left

    @contextmanager
    def slot(self) -> Iterator[None]:
        self.slots.acquire()
        try:
            yield
        finally:
            self.slots.release()


_gates: dict[tuple[str, str], Gate] = {}
_lock = threading.Lock()


def gate_for(provider: str, base_url: str) -> Gate:
    key = (provider, base_url.rstrip("/"))
    with _lock:
        gate = _gates.get(key)
        if gate is None:
            gate = _gates[key] = Gate(key, settings.PROVIDER_CONCURRENCY_PER_WORKER)
        return gate


def forget_inherited_gates() -> None:
    """In a forked child: the parent's gates may be held by threads that do not exist here."""
    global _lock
    _gates.clear()
    _lock = threading.Lock()
