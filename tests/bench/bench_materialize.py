"""Materialization throughput: due schedules through our tick (occurrence, conversation, queued
run, admission with its reservation, and one django-q2 task each), next to django-q2's own
scheduler handling as many due django_q.Schedule rows on the same database, measured in the
same run, at 1,000 / 10,000 / 50,000 due schedules, without and with a heavy ledger.

    .venv/bin/python tests/bench/bench_materialize.py [--sizes 1000,10000,50000] [--owners 1000]
        [--ledger 1000000] [--quick]

The due schedules belong to --owners owners; one of them, the busiest, owns every tenth
schedule and, in the second pass, --ledger ledger entries this month (with their rollups), so
every batch admits runs against the heaviest budget there is. Each batch is one transaction that
holds its owners' budget rows from admission to commit: the bench prints its p50 and max.
Goal (issue 13): at least 3x django-q2's rate, at every size, with the ledger as without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database, seed_rollups
from tests.bench.report import figure, parse_args

SCHEDULES_SQL = """
INSERT INTO schedules_schedule (id, owner_id, title, kind, status, consecutive_failures,
                                next_occurrence_at, created_at)
SELECT g, CASE WHEN g %% 10 = 0 THEN 1 ELSE 1 + g %% %(owners)s::bigint END, 'Briefing ' || g, 'recurring',
       'active', 0, now() + interval '1 day', now()
FROM generate_series(1, %(count)s::bigint) g;
INSERT INTO schedules_schedulerevision (id, schedule_id, number, created_at, created_by_id, path, via,
                                        reason, title, prompt, cron, timezone, run_at, agent_id,
                                        limits, max_consecutive_failures)
SELECT g, g, 1, now(), NULL, 'schedule.create', 'bench', '', 'Briefing ' || g, 'Research.',
       '* * * * *', 'Europe/Riga', NULL, %(agent)s, %(limits)s::jsonb, 2
FROM generate_series(1, %(count)s::bigint) g;
UPDATE schedules_schedule SET current_revision_id = id;
SELECT setval(pg_get_serial_sequence('schedules_schedule', 'id'), %(count)s);
SELECT setval(pg_get_serial_sequence('schedules_schedulerevision', 'id'), %(count)s)
"""

LEDGER_SQL = """
INSERT INTO accounting_ledgerentry (created_at, owner_id, run_id, schedule_id, provider, model,
                                    input_tokens, output_tokens, cost)
SELECT date_trunc('month', now()) + (now() - date_trunc('month', now()) - interval '1 minute')
           * (g::float / %(count)s::bigint),
       1, 900000000 + g, 10 * (1 + g %% 500), 'anthropic', 'claude-research', 12000, 1500,
       0.05 + (g %% 50) / 1000.0
FROM generate_series(1, %(count)s::bigint) g
"""

# What a tick writes, emptied between passes (the schedules themselves stay).
TICK_OUTPUT = [
    "django_q_ormq",
    "schedules_occurrence",
    "runs_transcriptentry",
    "runs_run",
    "runs_conversation",
    "accounting_reservation",
]


def execute(sql: str, params: dict[str, object]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in sql.split(";\n"):
            if statement.strip():
                cursor.execute(statement, params or None)


def seed(count: int, owners: int) -> None:
    from decimal import Decimal

    from django.contrib.auth.models import User

    from accounting.models import OwnerBudget
    from runs.models import Agent
    from tests.factories import limits

    agent = Agent.objects.create(
        name="sim-research",
        provider="simulated",
        model="sim-research",
        tools=["clock.now"],
        prices={"input": "3.00", "output": "15.00"},
        default_limits=limits().to_json(),
    )
    users = User.objects.bulk_create([User(username=f"bench{i}") for i in range(owners)])
    assert users[0].pk == 1, "the busiest owner is user 1"
    # Ceilings high enough that every run is admitted: this measures throughput, not refusals.
    OwnerBudget.objects.bulk_create(
        [
            OwnerBudget(
                owner=u,
                timezone="Europe/Riga",
                daily_ceiling=Decimal("10000000"),
                monthly_ceiling=Decimal("10000000"),
            )
            for u in users
        ]
    )
    pinned = limits(
        synthesis_reserve_steps=2, synthesis_reserve_model_calls=2, synthesis_reserve_cost="1.00"
    ).model_dump_json()
    execute(SCHEDULES_SQL, {"count": count, "owners": owners, "agent": agent.pk, "limits": pinned})


def make_due(count: int) -> None:
    """The first `count` schedules due 30 s ago, the rest tomorrow; the tick's output emptied."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(TICK_OUTPUT) + " CASCADE")
        cursor.execute(
            "UPDATE schedules_schedule SET next_occurrence_at = CASE WHEN id <= %s "
            "THEN now() - interval '30 seconds' ELSE now() + interval '1 day' END",
            [count],
        )
        cursor.execute("VACUUM ANALYZE schedules_schedule")


def ours(count: int) -> dict[str, float]:
    from django_q.models import OrmQ

    from schedules import execution
    from schedules.models import Occurrence
    from schedules.tasks import enqueue_occurrences

    make_due(count)
    batches: list[float] = []
    last = time.perf_counter()

    def batch_done(report: execution.TickReport) -> None:
        nonlocal last
        now = time.perf_counter()
        batches.append((now - last) * 1000)
        last = now
        print(f"  materialized: {len(report.enqueued)}/{count}", end="\r", flush=True)

    started = last = time.perf_counter()
    report = execution.materialize_due(enqueue=enqueue_occurrences, progress=batch_done)
    seconds = time.perf_counter() - started
    print()
    assert len(report.enqueued) == count and not report.refused, report
    assert Occurrence.objects.count() == count and OrmQ.objects.count() == count
    return {
        "seconds": seconds,
        "rate": count / seconds,
        "batch_p50": statistics.median(batches),
        "batch_max": max(batches),
    }


def django_q(count: int) -> dict[str, float]:
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.models import OrmQ
    from django_q.models import Schedule as QSchedule
    from django_q.scheduler import scheduler

    now = timezone.now()
    QSchedule.objects.all().delete()  # the periodic tick, reaper and notify rows too: a pure baseline
    OrmQ.objects.all().delete()
    QSchedule.objects.bulk_create(
        [
            QSchedule(
                name=f"bench-{i}",
                func="math.floor",
                args="1",
                schedule_type=QSchedule.MINUTES,
                minutes=1,
                repeats=-1,
                next_run=now - timedelta(seconds=30),
            )
            for i in range(count)
        ],
        batch_size=2000,
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_q_schedule")
    started = time.perf_counter()
    scheduler(broker=get_broker())
    seconds = time.perf_counter() - started
    assert OrmQ.objects.count() == count
    QSchedule.objects.all().delete()
    OrmQ.objects.all().delete()
    return {"seconds": seconds, "rate": count / seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--owners", type=int, default=1_000)
    parser.add_argument("--ledger", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    args = parse_args(parser, quick={"sizes": "300,1000", "owners": 50, "ledger": 10_000})
    sizes = [int(size) for size in args.sizes.split(",")]

    with bench_database("bench_materialize", keep=args.keep):
        from django.conf import settings

        print(f"seeding {sizes[-1]:,} schedules of {args.owners:,} owners …", flush=True)
        seed(sizes[-1], args.owners)
        rows = []
        for ledger in (0, args.ledger):
            if ledger:
                print(f"seeding {ledger:,} ledger entries this month for the busiest owner …", flush=True)
                execute(LEDGER_SQL, {"count": ledger})
                seed_rollups()
                execute("VACUUM ANALYZE accounting_ledgerentry;\nVACUUM ANALYZE accounting_spendrollup", {})
            for size in sizes:
                print(f"ours: {size:,} due schedules, {ledger:,} ledger entries …", flush=True)
                mine = ours(size)
                print(f"baseline: django-q2's scheduler over {size:,} due rows …", flush=True)
                theirs = django_q(size)
                rows.append((size, ledger, mine, theirs))

        print(f"\nthe tick in batches of {settings.SCHEDULE_TICK_BATCH}, next to django-q2's scheduler:\n")
        print(
            f"{'due':>8}{'ledger':>11}{'ours/s':>9}{'django-q2/s':>13}{'ratio':>8}"
            f"{'batch p50 ms':>14}{'batch max ms':>14}"
        )
        for size, ledger, mine, theirs in rows:
            print(
                f"{size:>8,}{ledger:>11,}{mine['rate']:>9.0f}{theirs['rate']:>13.0f}"
                f"{mine['rate'] / theirs['rate']:>7.2f}x{mine['batch_p50']:>14.1f}{mine['batch_max']:>14.1f}"
            )
        worst = min(mine["rate"] / theirs["rate"] for _, _, mine, theirs in rows)
        print(f"\nworst ratio {worst:.2f}x django-q2's rate (goal: at least 3x at every size, ledger or not)")
        print(
            "a batch's transaction holds its owners' budget rows from admission to commit: at most the above"
        )
        for size, ledger, mine, theirs in rows:
            ratio = mine["rate"] / theirs["rate"]
            figure(
                f"the tick: {size:,} due schedules, {ledger:,} ledger entries",
                mine["rate"],
                "schedules/s",
                baseline="django-q2's scheduler over as many due rows",
                baseline_value=theirs["rate"],
                goal=">= 3x",
                met=ratio >= 3,
            )
        figure(
            "a batch holds its owners' budget rows, p50",
            statistics.median(mine["batch_p50"] for _, _, mine, _ in rows),
            "ms",
        )
        figure(
            "a batch holds its owners' budget rows, at most",
            max(mine["batch_max"] for _, _, mine, _ in rows),
            "ms",
        )


if __name__ == "__main__":
    main()
