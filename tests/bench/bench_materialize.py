"""Materialization throughput: 10,000 due schedules through our tick (occurrences, admission with
reservations, and one django-q2 task each), next to django-q2's own scheduler handling 10,000 due
django_q.Schedule rows on the same database, measured in the same run.

    .venv/bin/python tests/bench/bench_materialize.py [--schedules 10000]

(DATABASE_URL names the server, default postgres://postgres@127.0.0.1:5432/postgres; the
script creates and drops its own database.)
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database, progress


def seed(count: int, owners: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from accounting.models import OwnerBudget
    from runs.models import Agent
    from schedules.models import Schedule, ScheduleRevision
    from tests.factories import limits

    now = timezone.now()
    agent = Agent.objects.create(
        name="sim-research",
        provider="simulated",
        model="sim-research",
        tools=["clock.now"],
        input_price_per_mtok=Decimal("3"),
        output_price_per_mtok=Decimal("15"),
        default_limits=limits().to_json(),
    )
    users = User.objects.bulk_create([User(username=f"bench{i}") for i in range(owners)])
    # Ceilings high enough that every run is admitted: this measures throughput, not refusals.
    OwnerBudget.objects.bulk_create(
        [
            OwnerBudget(
                owner=u,
                timezone="Europe/Riga",
                daily_ceiling=Decimal("100000"),
                monthly_ceiling=Decimal("100000"),
            )
            for u in users
        ]
    )
    pinned = limits(
        synthesis_reserve_steps=2, synthesis_reserve_model_calls=2, synthesis_reserve_cost="1.00"
    ).to_json()
    for start in range(0, count, 2000):
        chunk = range(start, min(count, start + 2000))
        schedules = Schedule.objects.bulk_create(
            [
                Schedule(
                    owner=users[i % owners],
                    title=f"Briefing {i}",
                    kind="recurring",
                    status="active",
                    next_occurrence_at=now - timedelta(seconds=30),
                )
                for i in chunk
            ]
        )
        ScheduleRevision.objects.bulk_create(
            [
                ScheduleRevision(
                    schedule=s,
                    number=1,
                    created_at=now,
                    path="schedule.create",
                    via="bench",
                    title=s.title,
                    prompt="Research.",
                    cron="* * * * *",
                    timezone="Europe/Riga",
                    agent=agent,
                    limits=pinned,
                    max_consecutive_failures=2,
                )
                for s in schedules
            ]
        )
        progress("seeding schedules", chunk.stop, count)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE schedules_schedule s SET current_revision_id = r.id FROM schedules_schedulerevision r "
            "WHERE r.schedule_id = s.id"
        )
        cursor.execute("ANALYZE")


def seed_django_q(count: int) -> None:
    from django.utils import timezone
    from django_q.models import Schedule as QSchedule

    now = timezone.now()
    QSchedule.objects.filter(name__startswith="bench-").delete()
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--owners", type=int, default=1_000)
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    args = parser.parse_args()

    with bench_database("bench_materialize", keep=args.keep):
        from django.db import connection
        from django_q.brokers import get_broker
        from django_q.models import OrmQ
        from django_q.scheduler import scheduler

        from schedules import execution
        from schedules.models import Occurrence
        from schedules.tasks import enqueue_occurrences

        seed(args.schedules, args.owners)
        # The periodic tick and reaper rows would be materialized too; keep the baseline pure.
        from django_q.models import Schedule as QSchedule

        QSchedule.objects.all().delete()

        print(
            f"ours: tick over {args.schedules} due schedules "
            "(occurrence, queued run, reservation and task each) …"
        )
        started = time.perf_counter()
        report = execution.materialize_due(
            enqueue=enqueue_occurrences,
            progress=lambda r: progress("materialized", len(r.enqueued), args.schedules),
        )
        ours = time.perf_counter() - started
        assert len(report.enqueued) == args.schedules, report
        assert Occurrence.objects.count() == args.schedules
        tasks_ours = OrmQ.objects.count()
        OrmQ.objects.all().delete()

        seed_django_q(args.schedules)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"baseline: django-q2 scheduler over {args.schedules} due django_q.Schedule rows …")
        started = time.perf_counter()
        scheduler(broker=get_broker())
        theirs = time.perf_counter() - started
        tasks_theirs = OrmQ.objects.count()

        ours_rate, theirs_rate = args.schedules / ours, args.schedules / theirs
        print()
        print(f"{'':34}{'seconds':>10}{'per second':>12}{'tasks':>8}")
        print(f"{'ours (tick, admission, enqueue)':34}{ours:>10.2f}{ours_rate:>12.0f}{tasks_ours:>8}")
        print(f"{'django-q2 scheduler (baseline)':34}{theirs:>10.2f}{theirs_rate:>12.0f}{tasks_theirs:>8}")
        print(f"ratio: {ours_rate / theirs_rate:.2f}x the baseline rate (goal: at least 3x)")


if __name__ == "__main__":
    main()
