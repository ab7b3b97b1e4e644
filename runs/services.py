"""Run state transitions. Every terminal write goes through `finish_run`."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from psycopg.errors import LockNotAvailable

from accounting import alerts, ledger
from runs import steps
from runs.failures import AdmissionDenied, Outcome, WorkerLost
from runs.history import earlier_exchanges
from runs.limits import RunLimits, with_reserves
from runs.models import (
    CREDENTIAL_PERMISSION,
    Agent,
    AgentCredentialChange,
    Conversation,
    ConversationAgentChange,
    Run,
    TranscriptEntry,
)
from runs.signals import run_finished

logger = logging.getLogger(__name__)

MAX_FAILURE_MESSAGE = 2000
# A transaction on a run's row whose host stops inside it (paused, cut off, swapping) would hold
# that row, and the owner's spend rows its end moves, for as long as its connection lives; whoever
# waits on them (the reaper, the owner's other runs) would wait as long. PostgreSQL ends such a
# transaction after this long idle, and the reaper gives up a wait for a row after this long too
# (that run is reaped at a later pass).
HELD_ROW_SECONDS = 5
_BOUNDED_SQL = (
    "SELECT set_config('idle_in_transaction_session_timeout', %s, true), set_config('lock_timeout', %s, true)"
)
CENT = Decimal("0.01")


def bound_transaction(seconds: float) -> None:
    """For the caller's transaction only (SET LOCAL): PostgreSQL ends it once it is `seconds` idle
    (its host stopped inside it), and a wait in it for another's lock fails after as long."""
    with connection.cursor() as cursor:
        cursor.execute(_BOUNDED_SQL, [f"{seconds}s", f"{seconds}s"])


def may_change_credentials(user: Any) -> bool:
    """Whether `user` may change an agent's provider, base URL or API key setting, or switch a
    conversation to another agent (CREDENTIAL_PERMISSION): the admin asks it before it offers
    those fields, these services before they write them."""
    return bool(user.has_perm(CREDENTIAL_PERMISSION))


def save_agent(
    agent: Agent, *, by: AbstractBaseUser, now: datetime | None = None
) -> list[AgentCredentialChange]:
    """Save an agent edited in the admin, new or changed. Giving it a provider, base URL or API-key
    setting, or changing one, needs the credentials permission; each such change is recorded
    (who, when, old -> new) in the same transaction. Returns the recorded changes."""
    now = now or timezone.now()
    with transaction.atomic():
        before = Agent.objects.select_for_update().filter(pk=agent.pk).first() if agent.pk else None
        changes = [
            AgentCredentialChange(
                agent=agent,
                changed_by_id=by.pk,
                changed_at=now,
                field=field,
                old_value=str(getattr(before, field)) if before else "",
                new_value=str(getattr(agent, field)),
            )
            for field in Agent.CREDENTIAL_FIELDS
            if str(getattr(before, field) if before else "") != str(getattr(agent, field))
        ]
        if changes and not may_change_credentials(by):
            raise PermissionDenied(
                "Changing an agent's provider, base URL or API key setting needs its own permission."
            )
        if problem := agent.price_problem():
            raise ValidationError({"prices": problem})
        agent.save()
        return AgentCredentialChange.objects.bulk_create(changes)


def change_conversation_agent(
    conversation: Conversation, agent: Agent, *, by: AbstractBaseUser, now: datetime | None = None
) -> ConversationAgentChange | None:
    """Switch the agent an owner's conversation continues with, recording who, when, old -> new
    in the same transaction. Another agent means other tools, prices and perhaps provider, so it
    needs the credentials permission. None when it already had that agent."""
    if not may_change_credentials(by):
        raise PermissionDenied("Switching a conversation's agent needs the agent credentials permission.")
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().get(pk=conversation.pk)  # the bare row
        if locked.agent_id == agent.pk:
            return None
        old = ""
        if locked.agent_id is not None:
            old = Agent.objects.filter(pk=locked.agent_id).values_list("name", flat=True).first() or ""
        Conversation.objects.filter(pk=locked.pk).update(agent=agent)
        return ConversationAgentChange.objects.create(
            conversation_id=locked.pk,
            changed_by_id=by.pk,
            changed_at=now or timezone.now(),
            old_agent=old,
            new_agent=agent.name,
        )


def agent_changes(conversation_id: int, *, most: int = 20) -> list[ConversationAgentChange]:
    """What change_conversation_agent recorded for a conversation, newest first, with who."""
    changes = ConversationAgentChange.objects.filter(conversation_id=conversation_id)
    return list(changes.select_related("changed_by")[:most])


class ConversationBusy(Exception):
    """The conversation has a run in flight; cancel it before deleting."""


def interactive_limits(agent: Agent) -> RunLimits:
    """Defaults for an interactive run whose caller gave none (docs/decisions/0001, amendment): the
    agent's totals, its finite cost limit, and the configured reserves, each kept only below its total."""
    base = agent.limits
    if agent.cost_limit is not None and agent.cost_limit < base.max_cost:
        base = base.model_copy(update={"max_cost": agent.cost_limit})
    # Whole cents, rounded down, so the reserve is an amount a person could have typed.
    cost_reserve = (base.max_cost * settings.INTERACTIVE_RESERVE_COST_FRACTION).quantize(CENT, ROUND_DOWN)
    return with_reserves(
        base,
        steps=settings.INTERACTIVE_RESERVE_STEPS,
        model_calls=settings.INTERACTIVE_RESERVE_MODEL_CALLS,
        tool_calls=settings.INTERACTIVE_RESERVE_TOOL_CALLS,
        cost=cost_reserve,
    )


@dataclass(frozen=True)
class RunSpec:
    owner_id: int
    agent: Agent
    prompt: str
    conversation: Conversation
    limits: dict[str, Any]  # a complete RunLimits JSON value, copied as it is
    kind: str = Run.Kind.INTERACTIVE
    parent: Run | None = None
    # The conversation's earlier exchanges its requests carry (runs.history): how many, and
    # whether older ones were left out. None: it carries none (a schedule's or a child's run).
    history_sent: int | None = None
    history_omitted: bool = False


def create_runs(specs: list[RunSpec], *, attempt: uuid.UUID | None = None) -> list[Run]:
    """New runs with their limits copied whole and their prompts as first transcript entries,
    in bulk. With `attempt`, they are created already claimed (running) by that attempt."""
    now = timezone.now()
    with transaction.atomic():
        runs = Run.objects.bulk_create(
            [
                Run(
                    owner_id=spec.owner_id,
                    conversation=spec.conversation,
                    agent=spec.agent,
                    kind=spec.kind,
                    parent=spec.parent,
                    prompt=spec.prompt,
                    limits=spec.limits,
                    status=Run.Status.RUNNING if attempt else Run.Status.QUEUED,
                    attempt=attempt,
                    started_at=now if attempt else None,
                    heartbeat_at=now if attempt else None,
                    history_sent=spec.history_sent,
                    history_omitted=spec.history_omitted,
                )
                for spec in specs
            ]
        )
        TranscriptEntry.objects.bulk_create(
            [
                TranscriptEntry(run=run, seq=0, role=TranscriptEntry.Role.USER, content=run.prompt)
                for run in runs
            ]
        )
    return runs


def create_run(
    owner_id: int,
    agent: Agent,
    prompt: str,
    *,
    conversation: Conversation,
    limits: RunLimits,
    kind: str = Run.Kind.INTERACTIVE,
    parent: Run | None = None,
    attempt: uuid.UUID | None = None,
) -> Run:
    """One new run (see create_runs). A message in a conversation the owner started gets its
    window of earlier exchanges now (runs.history): nothing before it can change any more."""
    spec = RunSpec(owner_id, agent, prompt, conversation, limits.to_json(), kind, parent)
    if kind == Run.Kind.INTERACTIVE and not conversation.is_scheduled and conversation.pk is not None:
        window = earlier_exchanges(conversation.pk, agent)
        spec = dataclasses.replace(spec, history_sent=len(window.runs), history_omitted=window.omitted)
    return create_runs([spec], attempt=attempt)[0]


def admit_runs(requests: list[ledger.ReservationRequest], *, now: datetime | None = None) -> set[int]:
    """Admission of queued runs (docs/contract.md#schedules), for the tick and for interactive starts
    alike: each run's max_cost is reserved against its owner's daily and monthly ceilings, in order, and
    a run that does not fit is failed `admission_denied` (counted like any failure; nothing reserved).
    Returns the ids of the admitted runs. Call it in the transaction that created the runs: if the
    reservations cannot be written, the runs are not either, so none starts without its money."""
    refusals = alerts.admit(requests, now=now)
    refused = Run.objects.select_related("conversation").in_bulk(list(refusals)) if refusals else {}
    for run_id, refusal in refusals.items():
        failure = AdmissionDenied(f"Admission refused: {refusal.message}.", dimension=refusal.ceiling)
        finish_run(refused[run_id], Outcome(status=Run.Status.FAILED, failure=failure))
    return {request.run_id for request in requests if request.run_id not in refusals}


def worker_label() -> str:
    """This process, as the runs it claims name it: "host:pid", the host as WORKER_HOST names it."""
    return f"{settings.WORKER_HOST}:{os.getpid()}"


def claim_run(run: Run) -> uuid.UUID | None:
    """queued -> running under a new attempt id, in this worker; None if someone else has it."""
    attempt = uuid.uuid4()
    now = timezone.now()
    worker = worker_label()
    claimed = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING, attempt=attempt, started_at=now, heartbeat_at=now, worker=worker
    )
    if claimed != 1:
        return None
    run.status, run.attempt, run.started_at, run.heartbeat_at = Run.Status.RUNNING, attempt, now, now
    run.worker = worker
    return attempt


def finish_run(
    run: Run,
    outcome: Outcome,
    *,
    attempt: uuid.UUID | None = None,
    silent_since: datetime | None = None,
    charge_open: bool = False,
    step: steps.Step | None = None,
) -> bool:
    """Write a run's terminal state, release its reservation and tell receivers, in one
    transaction. Compare-and-swap: True only for the call that finished it; a stale attempt
    (reaped, or cancelled meanwhile) changes nothing. `charge_open`: the loop ends its own run
    with a call that was answered (billed) and is not recorded; it is charged its bound. `step`:
    the loop's last step, sent with the end's statement in one round trip."""
    now = timezone.now()
    fields: dict[str, object] = {
        "status": outcome.status,
        "finished_at": now,
        "answer": outcome.answer,
        "answer_cut": outcome.answer_cut,
    }
    failure = outcome.failure
    if failure is not None:
        fields.update(failure.run_columns(), failure_message=failure.message[:MAX_FAILURE_MESSAGE])
    own = attempt is not None and silent_since is None
    if own and not charge_open:
        # The loop ends its own run: every call it made was charged, or was never answered (a
        # provider's error is not billed), so none is open any more.
        fields.update(open_call=None, partial_text="")
    # No savepoint of its own: inside a caller's transaction (the loop's end, the tick) it is
    # that transaction, and a failure rolls all of it back anyway.
    with transaction.atomic(savepoint=False):
        if not _end(run, fields, attempt=attempt, silent_since=silent_since, now=now, step=step):
            return False
        if not own or charge_open:
            # Stopped, or reaped, while a call was on the wire: the provider may have generated up
            # to its cap, and billed it. Charged here, before the run's end is told (its accounting
            # event carries it); the loop, if it comes back, finds the call taken. Or the loop's
            # own run failed before the answer to its call was written.
            if charge_open:
                basis = "estimate: the run failed before its answered call was recorded"
            elif silent_since is None:
                basis = "estimate: the run was stopped while the call was on the wire"
            else:
                basis = "estimate: its worker was lost while the call was on the wire"
            charged = steps.charge_open_call(run, basis=basis)
            if charged is not None:  # the row we hold, as the charge moved it
                run.steps, run.model_calls, run.cost = (
                    run.steps + 1,
                    run.model_calls + 1,
                    run.cost + charged.cost,
                )
                run.open_call, run.partial_text = None, ""
        run_finished.send(sender=Run, run=run)
    return True


# The columns a run's end reads back (all but its relations' objects): what the row holds once
# ended, counters a delegated child moved included, with no second statement.
_ENDED = [f for f in Run._meta.concrete_fields if not f.is_relation]
_COLUMNS = {f.name: f for f in Run._meta.concrete_fields}


def _end(
    run: Run,
    fields: dict[str, object],
    *,
    attempt: uuid.UUID | None,
    silent_since: datetime | None,
    now: datetime,
    step: steps.Step | None = None,
) -> bool:
    """Write `fields` if the run is still in flight (under `attempt`; for the reaper, only if still
    silent since `silent_since`, or never started), release its reservation (at `now`), and read the
    row back onto `run`, in one statement (UPDATE ... RETURNING), sent after `step` if given (the
    loop's last step, runs.steps.write_step_then). False, and nothing changed, when it is not."""
    assignments = ", ".join(f'"{_COLUMNS[name].column}" = %s' for name in fields)
    params: list[Any] = [
        None if value is None else _COLUMNS[name].get_db_prep_save(value, connection)
        for name, value in fields.items()
    ]
    where = ["id = %s", "status IN (%s, %s)"]
    params += [run.pk, Run.Status.QUEUED, Run.Status.RUNNING]
    if attempt is not None:
        where.append("attempt = %s")
        params.append(attempt)
    if silent_since is not None:
        where.append("(status = %s OR heartbeat_at < %s)")
        params += [Run.Status.QUEUED, silent_since]
    returning = ", ".join(f'"{field.column}"' for field in _ENDED)
    # An attempt's end (the loop's own, or the reaper's) is a transaction of its own: its idle
    # bound (HELD_ROW_SECONDS) is set by the statement itself, no round trip. Another caller's
    # transaction (the tick's refusals, a cancel) keeps its own setting.
    bound = f"{HELD_ROW_SECONDS}s" if attempt is not None else None
    sql = (
        "WITH bounded AS (SELECT set_config('idle_in_transaction_session_timeout', "  # noqa: S608 - model metadata, our fields
        "coalesce(%s, current_setting('idle_in_transaction_session_timeout')), true)), "
        f'ended AS (UPDATE "{Run._meta.db_table}" SET {assignments} '
        f"WHERE {' AND '.join(where)} AND EXISTS (SELECT FROM bounded) RETURNING {returning}), "
        f"{ledger.release_cte('ended')} SELECT * FROM ended"
    )
    if step is not None:
        row = steps.write_step_then(step, sql, [bound, *params, now])
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, [bound, *params, now])
            row = cursor.fetchone()
    if row is None:
        return False
    for field, value in zip(_ENDED, row, strict=True):
        for converter in field.get_db_converters(connection):
            value = converter(value, field, connection)
        setattr(run, field.attname, value)
    return True


def cancel_run(run: Run) -> bool:
    """Cancel a run and its in-flight delegated children. The loop stops before its next
    request. Idempotent: False when it had already ended."""
    with transaction.atomic():
        children = list(run.children.filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING]))
        for child in children:
            cancel_run(child)
        return finish_run(run, Outcome(status=Run.Status.CANCELLED))


class _Heart:
    """One thread per process beats for every run in flight in it: one UPDATE per beat whatever
    their number, on a connection of its own outside the pool, so a pool starved by busy runs
    can never make a live run look dead. It stops when no run is left and starts again with the
    next."""

    def __init__(self) -> None:
        self.attempts: dict[uuid.UUID, int] = {}  # attempt -> how many holders (a re-entered run)
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, attempt: uuid.UUID) -> None:
        with self.lock:
            self.attempts[attempt] = self.attempts.get(attempt, 0) + 1
            if self.thread is None:
                self.thread = threading.Thread(target=self.beat, name="heartbeat", daemon=True)
                self.thread.start()

    def remove(self, attempt: uuid.UUID) -> None:
        with self.lock:
            left = self.attempts.get(attempt, 1) - 1
            if left > 0:
                self.attempts[attempt] = left
            else:
                self.attempts.pop(attempt, None)

    def beat(self) -> None:
        try:
            while True:
                time.sleep(settings.RUN_HEARTBEAT_SECONDS)
                with self.lock:
                    attempts = list(self.attempts)
                    if not attempts:
                        self.thread = None
                        return
                try:
                    # A connection of its own for each beat (one every RUN_HEARTBEAT_SECONDS),
                    # none held between beats.
                    with _heartbeat_connection() as conn:
                        conn.execute(_HEARTBEAT_SQL, [attempts])
                except Exception:  # a missed beat is retried; the lease allows several
                    logger.warning("heartbeat failed for %d run(s)", len(attempts), exc_info=True)
        finally:
            with self.lock:
                if self.thread is threading.current_thread():
                    self.thread = None


_HEARTBEAT_SQL = (
    f"UPDATE {Run._meta.db_table} SET heartbeat_at = now() "  # noqa: S608 - the table from model metadata
    "WHERE attempt = ANY(%s::uuid[]) AND status = 'running'"
)


def _heartbeat_connection() -> Any:
    import psycopg

    return psycopg.connect(**connection.get_connection_params(), autocommit=True)


_heart = _Heart()


def forget_inherited_heart() -> None:
    """In a forked child: the parent's runs are not in flight here."""
    global _heart
    _heart = _Heart()


@contextlib.contextmanager
def keep_alive(attempt: uuid.UUID | None) -> Iterator[None]:
    """Heartbeat while the body runs, so a long provider call is not mistaken for a dead worker
    (the process's one heartbeat thread beats for all its runs in flight)."""
    if attempt is None:
        yield
        return
    _heart.add(attempt)
    try:
        yield
    finally:
        _heart.remove(attempt)


def lost_runs(now: datetime) -> list[Run]:
    """Running without a heartbeat for the lease, or queued for longer than django-q2 takes to
    redeliver a task a worker took and dropped (the caller checks those are not still waiting).
    Newest first: a delegated child ends (and its open call is charged to its parent too) before
    its parent's end is told."""
    lease = timedelta(seconds=settings.RUN_LEASE_SECONDS)
    never_started = timedelta(seconds=settings.Q_RETRY_SECONDS) + lease
    return list(
        Run.objects.filter(
            Q(status=Run.Status.RUNNING, heartbeat_at__lt=now - lease)
            | Q(status=Run.Status.QUEUED, created_at__lt=now - never_started)
        ).order_by("-id")
    )


def fail_lost_runs(
    *, now: datetime | None = None, still_waiting: Callable[[list[Run]], set[int]] | None = None
) -> list[int]:
    """Fail runs whose worker stopped heartbeating (docs/contract.md#schedules), and queued runs whose
    task is gone (`still_waiting` names, among the long-queued runs, those whose task is still in the
    queue behind a backlog; they are left alone). Idempotent; returns the run ids it failed. The failure
    counts like any other and the reservation is released."""
    now = now or timezone.now()
    silent_since = now - timedelta(seconds=settings.RUN_LEASE_SECONDS)
    candidates = lost_runs(now)
    queued = [run for run in candidates if run.status == Run.Status.QUEUED]
    waiting = still_waiting(queued) if queued and still_waiting is not None else set()
    restarted = _database_started_at() if len(queued) < len(candidates) else None
    failed: list[int] = []
    for run in candidates:
        if run.pk in waiting:
            continue
        if run.status == Run.Status.QUEUED:
            waited = int((now - run.created_at).total_seconds())
            failure = WorkerLost(f"No worker started the run: its task was lost ({waited} s in the queue).")
        elif restarted is not None and run.heartbeat_at is not None and run.heartbeat_at < restarted:
            # Its worker's connection broke with the restart, and the worker left the run here
            # (runs.runtime: the database gone): the worker itself may be well.
            failure = WorkerLost(
                "The database server restarted while the run was in flight, at "
                f"{restarted:%Y-%m-%d %H:%M:%S} UTC: its worker could not record the rest of the run."
            )
        else:
            silent = int((now - run.heartbeat_at).total_seconds()) if run.heartbeat_at else 0
            failure = WorkerLost(f"The worker stopped sending heartbeats ({silent} s without one).")
        outcome = Outcome(status=Run.Status.FAILED, failure=failure)
        try:
            with transaction.atomic():
                bound_transaction(HELD_ROW_SECONDS)
                # Compare-and-swap on the silence too: a run that heartbeats again now is not lost.
                if finish_run(run, outcome, attempt=run.attempt, silent_since=silent_since):
                    failed.append(run.pk)
        except OperationalError as exc:
            if not isinstance(exc.__cause__, LockNotAvailable):
                raise
            logger.warning("reaper: run %s is held by a transaction that has not ended; next pass", run.pk)
    return failed


def _database_started_at() -> datetime:
    """When the database server last started (UTC): a run whose last heartbeat is older was in
    flight when it restarted."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        started: datetime = cursor.fetchone()[0]
    return started.astimezone(UTC)


def delete_conversation(conversation: Conversation) -> int:
    """Delete a conversation with its runs, transcripts and failure records. Spend and
    accounting events stay (they hold ids, not rows). Returns the number of runs deleted.
    Raises Conversation.DoesNotExist when another request deleted it first (the row vanished
    between the caller's ownership check and this lock)."""
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        if locked is None:
            raise Conversation.DoesNotExist(f"Conversation {conversation.pk} was already deleted.")
        if locked.runs.filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING]).exists():
            raise ConversationBusy(conversation)
        count = locked.runs.count()
        locked.delete()
    return count
