"""django-q2 entry points of the run layer. With schedules/tasks.py, the only modules that import
django_q.

A message in a conversation writes one task, in the transaction that writes its run (ORM broker
on the same database). A task is a turn at claiming a queued run, the fairest one, which a worker
then drives on a thread among its runs in flight (runs.inflight).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.models import OrmQ
from django_q.signals import post_spawn
from django_q.tasks import async_task

from runs import outbound
from runs.inflight import WAKE_CHANNEL, take_turn

MESSAGE_TASK = "runs.tasks.run_message"


class BufferedOrmBroker(ORM):  # type: ignore[misc]
    """django-q2's ORM broker, keeping the packages async_task signs so a caller inserts all its
    tasks with one statement, in its own transaction. Tasks are still made by django-q2's own
    `async_task` (signing, naming, grouping); only the write is ours, in `flush`, because the tick
    enqueues a whole batch inside the transaction that holds its owners' budget rows: measured on
    embedded PostgreSQL 18, 1,000 tasks take 433 ms through the ORM broker's one INSERT each and
    108 ms as one INSERT (4x; 100 tasks: 41 against 6 ms), lock time every other admission waits."""

    def __init__(self) -> None:
        super().__init__()
        self.packages: list[str] = []

    def enqueue(self, task: str) -> None:
        self.packages.append(task)

    def flush(self) -> None:
        now = timezone.now()
        with connection.cursor() as cursor:  # one array parameter, not a model instance per task
            cursor.execute(
                f'INSERT INTO "{OrmQ._meta.db_table}" (key, payload, lock) '  # noqa: S608 - model metadata
                "SELECT %s, package, %s FROM unnest(%s::text[]) AS package",
                [self.list_key, now, self.packages],
            )
        self.packages = []


def in_transaction(send: Any, ids: list[int]) -> None:
    """Call `send(id, **options)` for each id so that its task is written in the caller's
    transaction (ORM broker on the default database), or sent once it commits (any other); and
    wake the workers when it commits."""
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(f"NOTIFY {WAKE_CHANNEL}")  # delivered when the caller's transaction commits
    if settings.Q_CLUSTER.get("orm") == "default":
        broker = BufferedOrmBroker()
        for task_id in ids:
            send(task_id, broker=broker)
        broker.flush()
    else:

        def send_all() -> None:
            for task_id in ids:
                send(task_id)

        transaction.on_commit(send_all)


def _send(run_id: int, **options: Any) -> None:
    async_task(MESSAGE_TASK, run_id, task_name=f"message-{run_id}", group="messages", **options)


def enqueue_runs(run_ids: list[int]) -> None:
    """One task per queued interactive run, atomically with the caller's write."""
    in_transaction(_send, run_ids)


def run_message(run_id: int) -> str:
    """A turn at claiming a queued run (runs.inflight): the fairest one, not necessarily the run
    that wrote this task; a second delivery claims nothing more than the runs still queued."""
    runs = take_turn(again=lambda: _send(run_id))
    started = f"{len(runs)} run(s) in flight" if runs else "nothing left to claim"
    return f"turn of run {run_id}: {started}"


def connect_worker_receivers() -> None:
    """What a django-q2 worker does as it spawns (runs.apps): it builds its TLS context then, not
    when the first burst's runs start."""
    post_spawn.connect(outbound.warm_tls, dispatch_uid="runs.warm_tls")
