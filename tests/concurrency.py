"""Real threads for race tests: each action gets its own database connection and they start
together behind a barrier, so the races the tests look for actually happen."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection


def race(actions: Sequence[Callable[[], Any]], *, timeout: float = 60) -> list[Any]:
    """Run the actions at once; returns each one's result, or the exception it raised."""
    start = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = actions[index]()
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    _close_idle_connections()
    return results


def _close_idle_connections() -> None:
    """The racers gave their connections back to the pool; close them, so that the next test (on
    this or another pytest worker) does not find the server's connection slots taken."""
    if connection.in_atomic_block:
        return
    connection.close()
    connection.close_pool()
