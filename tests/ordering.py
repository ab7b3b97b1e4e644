"""The order the suite runs in under pytest-xdist: the slowest tests first, spread over the workers.

`--dist worksteal` deals the collected tests to the workers in contiguous slices of equal count and
each worker runs its slice in order; a worker that runs out takes the second half of what another
still has queued. Left in collection order, a test of a minute and a half can start last and be
the suite's tail. So each worker's slice starts with its share of the slow tests, longest first,
dealt so that the slices' known costs are even (longest first onto the least loaded slice), and
ends with the many fast ones, which are what the others steal.

The costs are tests/durations.json: seconds per test id, for the tests that take at least two
(setup, call and teardown together), as `pytest --store-durations` writes them at the end of a
whole run. A test missing from it counts as fast; a test renamed or gone is ignored. The tests
that take turns through a file lock (`one_at_a_time`, tests/hosts) are dealt as one job, in order,
to one worker: spread over several, each would wait on the others with nothing else to do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
SLOW_SECONDS = 2.0
TAKE_TURNS = "one_at_a_time"


def known_costs() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def slices(count: int, workers: int) -> list[int]:
    """How many tests each worker is dealt at the start (xdist's WorkStealingScheduling)."""
    sizes = []
    left = count
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def slowest_first(items: list[pytest.Item], workers: int, costs: dict[str, float]) -> list[pytest.Item]:
    sizes = slices(len(items), workers)
    # Items that share an id (a generated test's cases) share its recorded seconds.
    shared: dict[str, int] = {}
    for item in items:
        shared[item.nodeid] = shared.get(item.nodeid, 0) + 1
    jobs: dict[str, list[pytest.Item]] = {}
    for item in items:
        together = TAKE_TURNS in getattr(item, "fixturenames", ())
        key = TAKE_TURNS if together else item.nodeid
        if together or costs.get(item.nodeid, 0.0) > 0:
            jobs.setdefault(key, []).append(item)

    def cost(job: list[pytest.Item]) -> float:
        return sum(costs.get(item.nodeid, 0.0) / shared[item.nodeid] for item in job)

    dealt: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    placed: set[int] = set()
    for job in sorted(jobs.values(), key=cost, reverse=True):  # stable: ties keep collection order
        room = [k for k in range(workers) if len(dealt[k]) + len(job) <= sizes[k]]
        if not room:
            continue  # left where it falls among the fast tests
        k = min(room, key=lambda k: loads[k])
        dealt[k] += job
        loads[k] += cost(job)
        placed.update(id(item) for item in job)
    fast = iter(item for item in items if id(item) not in placed)
    for k in range(workers):
        dealt[k] += [next(fast) for _ in range(sizes[k] - len(dealt[k]))]
    ordered = [item for part in dealt for item in part]
    assert len(ordered) == len(items)
    return ordered


def modify_items(items: list[pytest.Item]) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers >= 2:  # (in a worker, xdist's own options read "no distribution")
        items[:] = slowest_first(items, workers, known_costs())


class DurationStore:
    """`--store-durations`: at the end of the run (the controller's, under xdist), tests/durations.json
    with every test of at least SLOW_SECONDS."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        slow = {
            nodeid: round(seconds, 1)
            for nodeid, seconds in sorted(self.seconds.items(), key=lambda kv: (-kv[1], kv[0]))
            if seconds >= SLOW_SECONDS
        }
        DURATIONS.write_text(json.dumps(slow, indent=1, ensure_ascii=False) + "\n")
