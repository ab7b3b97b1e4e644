"""A run due now starts now (docs/contract.md#runs-in-flight): each worker process of a cluster keeps
one thread that sleeps until the next schedule's slot or a PostgreSQL notification, whichever comes
first, instead of waiting for django-q2's minute tick and its broker's poll.

- At the earliest `next_occurrence_at` of an active schedule it runs the tick (materialize_due):
  several processes and hosts may run it at the same moment, each claiming other due schedules
  (`SKIP LOCKED`), as they always could.
- On `NOTIFY runs_wake` (runs.inflight.WAKE_CHANNEL) it takes a turn (runs.inflight.take_turn):
  claims queued runs into this process's free slots. The notification is sent in the transaction
  that queues runs (the tick, a message, runs.tasks.in_transaction), so it arrives when they are
  committed; and by a statement trigger whenever a schedule's next slot is written, so a new or
  resumed schedule's slot is known at once.
- At most WAKER_FALLBACK_SECONDS (a setting, 2 s) after its last turn, notified or not and
  however near the next slot is, it takes a turn: a notification lost with a dropped connection
  costs at most that long, never a run, and a queued run whose task died with its host (its
  turn never came, or the host was paused or cut off mid-turn) is claimed by a live host within
  it, not at the broker's retry.

django-q2 stays the executor and the fallback: the tick still runs every minute and every queued
run still has its task, whose turn finds it already claimed and ends at once. The thread holds one
database connection of its own (LISTEN needs one that stays open): behind a transaction-pooling
proxy, DATABASE_LISTEN_URL names the server itself for it (docs/deploying.md).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection

from runs.inflight import WAKE_CHANNEL, take_turn
from schedules import execution
from schedules.models import Schedule

logger = logging.getLogger(__name__)

AFTER_TICK_SECONDS = 0.2  # a slot still due right after a tick is another process's to write
RECONNECT_SECONDS = 2.0
APPLICATION_NAME = "schedules-waker"  # how its connection shows in pg_stat_activity

_NEXT_SLOT_SQL = f"""SELECT extract(epoch FROM min(next_occurrence_at) - now())
FROM {Schedule._meta.db_table} WHERE status = 'active'"""  # noqa: S608 - the table from model metadata


class Waker:
    def __init__(self, enqueue: Any) -> None:
        self.enqueue = enqueue  # how the tick writes its runs' tasks (schedules.tasks)
        self.thread: threading.Thread | None = None
        self.turned_at = 0.0  # time.monotonic() of the last turn, whatever took it

    def start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self.run, name="waker", daemon=True)
            self.thread.start()

    def run(self) -> None:
        while True:
            try:
                self.listen()
            except Exception:  # the database away, or a bug: logged, and listened to again
                logger.warning("the waker lost its database connection; listening again", exc_info=True)
            time.sleep(RECONNECT_SECONDS)

    def listen(self) -> None:
        import psycopg

        params = {**_listen_params(), "application_name": APPLICATION_NAME}
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f"LISTEN {WAKE_CHANNEL}")
            self.turn()  # whatever was queued while nobody listened
            ticked_at = 0.0
            fallback = settings.WAKER_FALLBACK_SECONDS  # the longest a run waits for a lost notification
            while True:
                row = conn.execute(_NEXT_SLOT_SQL).fetchone()
                due_in = float(row[0]) if row and row[0] is not None else fallback
                since_tick = time.monotonic() - ticked_at
                if due_in <= 0 and since_tick >= AFTER_TICK_SECONDS:
                    self.tick()
                    ticked_at = time.monotonic()
                    continue
                # The fallback turn is due `fallback` seconds after the last turn, whenever the next
                # slot is: slots that keep coming (or keep moving) never put it off.
                fallback_in = self.turned_at + fallback - time.monotonic()
                wait = min(fallback_in, max(due_in, AFTER_TICK_SECONDS - since_tick))
                notified = any(True for _ in conn.notifies(timeout=max(wait, 0.01), stop_after=1))
                if notified or time.monotonic() >= self.turned_at + fallback:
                    self.turn()

    def tick(self) -> None:
        try:
            report = execution.materialize_due(enqueue=self.enqueue)
            if report.enqueued:
                logger.info("tick at the slot: %s", report)
        finally:
            connection.close()  # this thread's pooled connection, back to the pool
        self.turn()

    def turn(self) -> None:
        self.turned_at = time.monotonic()
        take_turn()  # never waits for a slot; gives its connection back to the pool


def _listen_params() -> dict[str, Any]:
    """The LISTEN session's connection: DATABASE_LISTEN_URL's server when one is set (the server
    itself, past a transaction-pooling proxy that cannot hold a session), else the application's."""
    listen = settings.DATABASE_LISTEN
    if not listen:
        return dict(connection.get_connection_params())
    params = {
        "dbname": listen["NAME"],
        "user": listen["USER"],
        "password": listen["PASSWORD"],
        "host": listen["HOST"],
        "port": listen["PORT"],
        **listen["OPTIONS"],
    }
    return {key: value for key, value in params.items() if value}


_waker: Waker | None = None


def start(enqueue: Any) -> None:
    """Start this process's waker (a django-q2 worker process, once, as it spawns)."""
    global _waker
    if _waker is None:
        _waker = Waker(enqueue)
    _waker.start()


def forget_inherited_waker() -> None:
    """In a forked child: the parent's thread did not survive the fork."""
    global _waker
    _waker = None
