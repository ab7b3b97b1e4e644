"""Several hosts, one database: each simulated host is a django-q2 cluster (`manage.py qcluster`) in
its own process group, with its own settings, reaching PostgreSQL only through a proxy of its own
(tests/hosts/proxy.py) that the test can cut, slow down and resume.

The tests that start three hosts take turns across pytest-xdist workers (a file lock): three
clusters at once are what a 2-core machine can run beside the rest of the suite, not six.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.utils import timezone
from django_q.models import Schedule as QueueSchedule

from accounting import ledger
from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Run
from schedules import tasks, waker
from schedules.models import Occurrence, Schedule
from tests.factories import make_agent, make_schedule, make_user
from tests.hosts.proxy import Proxy
from tests.scheduler.conftest import ROOT, wait_for

HEARTBEAT_SECONDS = 1
LEASE_SECONDS = 6  # short, so a fault outlives it in seconds; several beats, so load does not
PROVIDER_DELAY = 2.0  # each run's one call waits this long on the simulated provider


@pytest.fixture
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Three hosts at a time on this machine, whichever pytest-xdist worker starts them."""
    shared = tmp_path_factory.getbasetemp().parent  # the same directory for every xdist worker
    with open(shared / "hosts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass
class Host:
    """One machine: a cluster behind its own proxy to the database."""

    name: str
    proxy: Proxy
    env: dict[str, str]
    logs: Path
    process: subprocess.Popen[bytes] | None = None
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        log = open(self.logs / f"{self.name}-{len(self.started)}.log", "wb")  # noqa: SIM115 - the child's
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a signal reaches the whole cluster
        )
        log.close()
        self.started.append(self.process)

    def signal(self, number: int) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, number)

    def kill(self) -> None:
        """kill -9 of every process of the cluster, as when the machine dies."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM, as a deploy stops it: the cluster waits for its runs in flight."""
        self.signal_main(signal.SIGTERM)
        self.wait(timeout)

    def signal_main(self, number: int) -> None:
        """To the cluster's main process only, as a process manager sends it."""
        assert self.process is not None
        self.process.send_signal(number)

    def wait(self, timeout: float) -> None:
        assert self.process is not None
        self.process.wait(timeout=timeout)

    def log(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.logs.glob(f"{self.name}-*.log"))
        )

    def end(self) -> None:
        for process in self.started:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGCONT)  # a stopped group dies only once woken
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=10)
        self.proxy.close()


def _url_through(port: int) -> str:
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres")
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@127.0.0.1:{port}/{db['NAME']}"


def wakers() -> int:
    """Worker processes listening for work (each waker holds one connection)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            [waker.APPLICATION_NAME],
        )
        return int(cursor.fetchone()[0])


class Hosts(list[Host]):
    def wait_ready(self, count: int | None = None, timeout: float = 60) -> None:
        wanted = len(self) if count is None else count

        def listening() -> bool:
            """every host's worker to listen"""
            return wakers() >= wanted

        wait_for(listening, timeout=timeout, interval=0.2)

    def logs(self) -> str:
        """Each host's log, and how each failed run failed (which worker, what it says)."""
        failed = Run.objects.filter(status=Run.Status.FAILED).values_list("worker", "failure_message")
        lines = sorted({f"{worker}: {message}" for worker, message in failed})
        return "\n".join([*(host.log() for host in self), "--- failed runs", *lines])


def make_host(name: str, logs: Path, **settings: str) -> Host:
    """A host behind a new proxy of its own, not started: one worker process, the harness's short
    heartbeat and lease, and `settings` (environment variables) on top."""
    db = connection.settings_dict
    proxy = Proxy.to(db["HOST"] or "localhost", db["PORT"])
    port = proxy.start()
    env = {
        **os.environ,
        "APP_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "Q_WORKERS": "1",
        "PYTHONUNBUFFERED": "1",
        "RUN_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
        "RUN_LEASE_SECONDS": str(LEASE_SECONDS),
        "DATABASE_URL": _url_through(port),
        "WORKER_HOST": name,
        **settings,
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return Host(name, proxy, env, logs)


@pytest.fixture
def hosts(tmp_path: Path, transactional_db: None, one_at_a_time: None) -> Iterator[Hosts]:
    """Three hosts, started: host-a, host-b and host-c, each one worker process with 20, 30 and 40
    runs in flight at most. Every process they start is killed at teardown, the test failed or not."""
    QueueSchedule.objects.all().delete()  # no minute tick of django-q2: the wakers tick at the slot
    made = Hosts()
    try:
        for name, slots in (("host-a", 20), ("host-b", 30), ("host-c", 40)):
            made.append(make_host(name, tmp_path, RUNS_IN_FLIGHT_PER_WORKER=str(slots)))
        for host in made:
            host.start()
        made.wait_ready()
        yield made
    finally:
        for host in made:
            host.end()


@pytest.fixture
def owners(transactional_db: None, settings: Any) -> list[User]:
    """Four owners with room for hundreds of schedules and their spend."""
    settings.MAX_ACTIVE_SCHEDULES = 1000
    settings.RUN_LEASE_SECONDS = LEASE_SECONDS  # the reaper this test runs uses the hosts' lease
    settings.RUN_HEARTBEAT_SECONDS = HEARTBEAT_SECONDS
    made = []
    for name in ("ana", "bo", "cy", "dee"):
        owner = make_user(name)
        budget = ledger.budget_for(owner.pk)
        budget.daily_ceiling = budget.monthly_ceiling = budget.schedule_cost_ceiling = Decimal("100000")
        budget.save()
        made.append(owner)
    return made


def seed(owners: list[User], count: int, *, delay: float = PROVIDER_DELAY) -> list[Schedule]:
    """`count` one-time schedules spread over the owners, each run one call of `delay` seconds."""
    agent = make_agent(model="sim-slow")
    later = timezone.now() + timedelta(hours=1)
    prompt = f"Wait on the provider: delay={delay}"
    return [
        make_schedule(owners[i % len(owners)], agent, title=f"Briefing {i}", prompt=prompt, run_at=later)
        for i in range(count)
    ]


def due_now(schedules: list[Schedule]) -> None:
    """Every schedule's slot now, together: each host's waker is told (the slot's trigger) and
    ticks, claiming other due schedules than the others (SKIP LOCKED)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE schedules_schedule SET next_occurrence_at = now() WHERE id = ANY(%s)",
            [[schedule.pk for schedule in schedules]],
        )


def fired(schedules: list[Schedule]) -> Any:
    def all_fired() -> bool:
        """every schedule's slot to be ticked"""
        return Occurrence.objects.filter(schedule__in=schedules).count() == len(schedules)

    return all_fired


def started(count: int) -> Any:
    def enough() -> bool:
        """that many runs to start"""
        return Run.objects.filter(started_at__isnull=False).count() >= count

    return enough


def settle(timeout: float = 90) -> None:
    """Until no slot is due and no run is queued or running: the reaper runs every second meanwhile
    (a live host's runs it every minute; the lease is what it waits for, not its period)."""

    def settled() -> bool:
        """every slot due to be ticked, every run to end, each lost one reaped"""
        tasks.reap()
        due = Schedule.objects.filter(status=Schedule.Status.ACTIVE, next_occurrence_at__lte=timezone.now())
        return not due.exists() and not Run.objects.exclude(status__in=Run.TERMINAL).exists()

    wait_for(settled, timeout=timeout, interval=1.0)


def assert_invariants(schedules: list[Schedule], owners: list[User]) -> dict[str, int]:
    """What must hold after any fault, read from the database. Returns the runs' outcomes counted
    by status and failure reason ("completed", "failed worker_lost", …)."""
    # Every occurrence run exactly once, or failed with its reason; every schedule fired once.
    per_schedule = dict(
        Occurrence.objects.filter(schedule__in=schedules)
        .values_list("schedule_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    assert per_schedule == {schedule.pk: 1 for schedule in schedules}
    occurrences = list(Occurrence.objects.filter(schedule__in=schedules).select_related("run"))
    outcomes: dict[str, int] = {}
    for occurrence in occurrences:
        run = occurrence.run
        assert run is not None, occurrence
        assert occurrence.outcome == run.status, (occurrence, run)
        if run.status == Run.Status.COMPLETED:
            key = "completed"
        else:
            assert run.status == Run.Status.FAILED and run.failure_reason and run.failure_message, run
            key = f"failed {run.failure_reason}"
        outcomes[key] = outcomes.get(key, 0) + 1
    # No run left running or queued, and no run but the occurrences' (nothing ran twice).
    assert not Run.objects.filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING]).exists()
    assert Run.objects.count() == len(occurrences)
    # No run charged twice: one call each, charged once, and what the run says it cost.
    runs = {run.pk: run for run in Run.objects.all()}
    entries: dict[int, list[LedgerEntry]] = {}
    for entry in LedgerEntry.objects.all():
        entries.setdefault(entry.run_id, []).append(entry)
    for run_id, charged in entries.items():
        assert len(charged) == 1, charged
        assert charged[0].cost == runs[run_id].cost, (charged, runs[run_id])
    for run in runs.values():
        if run.status == Run.Status.COMPLETED:
            assert run.model_calls == 1 and run.pk in entries, run
    # One accounting event per run's end.
    events = dict(AccountingEvent.objects.values_list("run_id").annotate(n=Count("id")).order_by())
    assert events == {pk: 1 for pk in runs}
    # Every reservation released.
    for owner in owners:
        assert ledger.summarize(owner.pk).open_total == Decimal("0"), owner
    # The spend rollups equal the ledger (raises CommandError naming the difference otherwise).
    call_command("check_rollups", stdout=open(os.devnull, "w"))  # noqa: SIM115
    return outcomes


def by_host() -> dict[str, int]:
    """Runs started per host (WORKER_HOST, the part of the worker's label before the pid)."""
    counts: dict[str, int] = {}
    for worker in Run.objects.exclude(worker="").values_list("worker", flat=True):
        host = worker.rsplit(":", 1)[0]
        counts[host] = counts.get(host, 0) + 1
    return counts
