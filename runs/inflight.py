"""Many runs in flight in one worker process (docs/decisions/0005-runs-in-flight.md).

A run spends nearly all its life waiting on its provider, so a django-q2 task is not a run but a
turn at claiming one. The tick and each new message write one task per queued run, as before;
the task a worker takes

1. takes the free ones of its process's RUNS_IN_FLIGHT_PER_WORKER slots, never waiting for one
   (the worker's main thread stays free for the tick, the reaper and the notices);
2. claims the queued runs that come first in the fair order: the owner with the fewest runs
   running first, then that owner's oldest run, so one owner's burst never starves another;
3. drives each on a thread of its own and returns at once.

A slot that frees claims the next queued run itself, so every queued run is claimed while any
run is in flight, whatever happened to the tasks of a full worker. The run's thread gives its
database connection back to the pool before each provider request and each tool (runs.runtime),
and the process's one heartbeat thread beats for all its runs (runs.services).
A worker process that ends (recycled, or the cluster stopping) waits for its runs first: they
are not daemon threads; meanwhile it claims no new run. One killed with them in flight stops
heartbeating them, and the reaper fails each with `worker_lost`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from runs.models import Run
from runs.runtime import execute_run
from runs.services import bound_transaction, claim_run, worker_label
from runs.signals import run_claimed

logger = logging.getLogger(__name__)

# The owners with queued runs, those with the fewest running first, then by their oldest queued
# run. The claim then takes the first owner's oldest run no other claimer holds.
_FAIR_OWNERS_SQL = f"""
WITH queued AS (
    SELECT owner_id, min(id) AS oldest FROM {Run._meta.db_table}
    WHERE status = 'queued' AND parent_id IS NULL GROUP BY owner_id
),
running AS (
    SELECT owner_id, count(*) AS n FROM {Run._meta.db_table}
    WHERE status = 'running' AND owner_id IN (SELECT owner_id FROM queued) GROUP BY owner_id
)
SELECT q.owner_id FROM queued q LEFT JOIN running r ON r.owner_id = q.owner_id
ORDER BY coalesce(r.n, 0), q.oldest
LIMIT %s
"""  # noqa: S608 - the table name from model metadata
CLAIMS_PER_TURN = 10  # runs one task may claim when slots are free
# Notified when runs are queued (runs.tasks) or a schedule's next slot is written: each worker's
# waker (schedules.waker) takes a turn at once instead of waiting for the broker's poll.
WAKE_CHANNEL = "runs_wake"
OWNERS_PER_CLAIM = 20  # owners tried before giving up on a turn (others hold their runs' locks)
# A claim takes milliseconds. One whose host stops inside it (paused, cut off, swapping) would hold
# the queued run's row lock, which every other claimer skips, for as long as its connection lives:
# PostgreSQL ends such a transaction after this long idle, and a lock wait after this long too, so
# a live host claims the run within seconds.
CLAIM_TIMEOUT_SECONDS = 5


class _Flights:
    """This process's slots and the runs flying in them."""

    def __init__(self) -> None:
        self.slots = threading.BoundedSemaphore(settings.RUNS_IN_FLIGHT_PER_WORKER)
        self.lock = threading.Lock()
        self.runs: set[int] = set()

    def count(self) -> int:
        with self.lock:
            return len(self.runs)


_flights: _Flights | None = None
_flights_lock = threading.Lock()


def flights() -> _Flights:
    global _flights
    with _flights_lock:
        if _flights is None:
            _flights = _Flights()
        return _flights


def forget_inherited_flights() -> None:
    """In a forked child: the parent's runs and slots are not this process's."""
    global _flights, _flights_lock
    _flights = None
    _flights_lock = threading.Lock()


def take_turn(*, again: Callable[[], None] | None = None) -> list[Run]:
    """One task's turn: claim the fairest queued runs, as many as this process has free slots
    for (up to CLAIMS_PER_TURN), and start each on its own thread. Returns the runs started
    (none when no slot was free or no queued run was left).

    It never waits for a slot: a worker's main thread stays free for the tick, the reaper and
    the notices, however long the runs in flight take. A turn that finds every slot taken ends at
    once; the runs it would have claimed are claimed by the runs in flight as each ends (`_fly`).
    One that fails before it claims hands a new task to the queue (`again`). Claiming several per
    turn spares most of django-q2's cost per task when a burst is due; the turns of the runs
    claimed early then find nothing left and end at once."""
    if ending():
        return []
    mine = flights()
    held = 0
    while held < CLAIMS_PER_TURN and mine.slots.acquire(blocking=False):
        held += 1
    started: list[Run] = []
    try:
        while len(started) < held:
            run = claim_next()
            if run is None:
                break
            _start(run, mine)
            started.append(run)
    except Exception:
        logger.exception("a turn failed after claiming %d run(s)", len(started))
        if again is not None:
            again()
    finally:
        for _ in range(held - len(started)):
            mine.slots.release()
        connection.close()  # the worker's own connection, back to the pool while runs fly
    return started


def _start(run: Run, mine: _Flights) -> None:
    with mine.lock:
        mine.runs.add(run.pk)
    try:
        # Not a daemon, whoever starts it: a worker that ends waits for its runs (multiprocessing
        # joins them). Said outright, since a thread inherits its starter's flag, and the waker's
        # turns start runs from a daemon thread: those runs died with a stopping worker.
        threading.Thread(target=_fly, args=(run, mine), name=f"run-{run.pk}", daemon=False).start()
    except BaseException:
        with mine.lock:
            mine.runs.discard(run.pk)
        raise  # the claimed run is the reaper's once its heartbeat lapses


def _fly(run: Run | None, mine: _Flights) -> None:
    """Drive the run, then, in the same slot, the fairest queued run left, until none is: a slot
    that frees takes the next run itself, without waiting for a task to arrive."""
    try:
        while run is not None:
            try:
                execute_run(run)
            except BaseException:  # execute_run records a run's failures; this is ours, logged
                logger.exception("run %s: its thread failed", run.pk)
            finally:
                with mine.lock:
                    mine.runs.discard(run.pk)
            try:
                run = None if ending() else claim_next()
            except Exception:
                logger.exception("claiming the next run after %s failed", run.pk if run else None)
                run = None
            if run is not None:
                with mine.lock:
                    mine.runs.add(run.pk)
    finally:
        connection.close()
        mine.slots.release()


def ending() -> bool:
    """This process is ending: its main thread has returned (a worker django-q2 recycles, or its
    cluster stopping on SIGTERM) and waits for its runs' threads. It finishes the runs it holds and
    claims no new one, so a deploy's stop waits for the runs in flight, not for the whole queue:
    the other workers and hosts claim the rest."""
    return not threading.main_thread().is_alive()


def claim_next() -> Run | None:
    """Claim the queued run the fair order puts first (an occurrence's run marks its occurrence
    running with it, in the same transaction). When every run of the owners read is taken by
    other claimers meanwhile, the order is read again; then any queued run no claimer holds.
    None when there is none left to claim."""
    for _ in range(3):
        with connection.cursor() as cursor:
            cursor.execute(_FAIR_OWNERS_SQL, [OWNERS_PER_CLAIM])
            owners = [row[0] for row in cursor.fetchall()]
        if not owners:
            return None
        for owner_id in owners:
            if run := _claim_oldest(owner_id=owner_id):
                return run
    return _claim_oldest()


def _claim_oldest(**among: int) -> Run | None:
    with transaction.atomic():
        bound_transaction(CLAIM_TIMEOUT_SECONDS)
        run = (
            Run.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("agent", "conversation")
            .filter(status=Run.Status.QUEUED, parent__isnull=True, **among)
            .order_by("id")
            .first()
        )
        if run is None:
            return None
        attempt = claim_run(run)
        if attempt is None:
            return None
        run_claimed.send(Run, run=run, attempt=attempt)
    return run


@dataclass(frozen=True)
class Worker:
    """A worker process holding runs: "host:pid" as it labels them (WORKER_HOST), how many, and
    its last heartbeat (the newest of its runs'). Lost once that is older than the lease: its
    host was killed, paused or cut off, and the reaper will fail its runs `worker_lost`."""

    label: str
    running: int
    last_heartbeat: datetime | None
    lost: bool

    @property
    def host(self) -> str:
        return self.label.rsplit(":", 1)[0]


@dataclass(frozen=True)
class InFlight:
    """Runs in flight and queued: an owner's, or everyone's with the running ones per worker."""

    running: int
    queued: int
    workers: tuple[Worker, ...] = ()

    @property
    def lost(self) -> int:
        """Workers lost, with runs the reaper has not failed yet."""
        return sum(worker.lost for worker in self.workers)


def in_flight(owner_id: int | None = None, *, now: datetime | None = None) -> InFlight:
    runs = Run.objects.filter(status__in=[Run.Status.RUNNING, Run.Status.QUEUED], parent__isnull=True)
    if owner_id is not None:
        runs = runs.filter(owner_id=owner_id)
    counts = dict(runs.values_list("status").annotate(n=Count("id")).order_by())
    workers: list[Worker] = []
    if owner_id is None:
        silent_since = (now or timezone.now()) - timedelta(seconds=settings.RUN_LEASE_SECONDS)
        rows = (
            runs.filter(status=Run.Status.RUNNING)
            .values_list("worker")
            .annotate(n=Count("id"), beat=Max("heartbeat_at"))
            .order_by("worker")
        )
        workers = [
            Worker(label or "unknown", n, beat, lost=beat is None or beat < silent_since)
            for label, n, beat in rows
        ]
    return InFlight(
        running=counts.get(Run.Status.RUNNING, 0),
        queued=counts.get(Run.Status.QUEUED, 0),
        workers=tuple(workers),
    )


__all__ = ["InFlight", "Worker", "claim_next", "flights", "in_flight", "take_turn", "worker_label"]
