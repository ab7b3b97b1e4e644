"""End to end: 1,000 occurrences of sim-research executed by a real 2-worker django-q2 cluster.
Prints runs per second and the lag from `scheduled_for` to run start (p50, p99), next to the
same runs executed in-process one after another (no queue, no workers) as the baseline.

    .venv/bin/python tests/bench/bench_cluster.py [--occurrences 1000] [--workers 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("MAX_ACTIVE_SCHEDULES", "100000")  # one owner's whole burst (the cluster's too)
from tests.bench._setup import bench_database, progress, start_cluster, stop_cluster
from tests.bench.report import figure, parse_args


def seed(count: int, due_in: float) -> None:
    from decimal import Decimal

    from django.contrib.auth.models import User
    from django.utils import timezone

    from accounting import ledger
    from schedules.schemas import parse_create
    from schedules.services import create_schedule
    from tests.factories import make_agent

    owner = User.objects.create(username="busy")
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = budget.monthly_ceiling = budget.schedule_cost_ceiling = Decimal("100000")
    budget.save()
    agent = make_agent("sim-research", model="sim-research")
    run_at = timezone.now() + timedelta(seconds=due_in)
    for index in range(count):
        data = {"title": f"Briefing {index}", "prompt": "Research.", "agent": agent.name, "run_at": run_at}
        create_schedule(owner, parse_create(data), via="bench")
        if (index + 1) % 100 == 0:
            progress("seeding one-time schedules", index + 1, count)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--occurrences", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--due-in", type=float, default=30, help="seconds to the slot: the cluster starts")
    args = parse_args(parser, quick={"occurrences": 30, "due_in": 10})

    with bench_database("bench_cluster") as url:
        from django.db import connections
        from django.utils import timezone
        from django_q.models import Schedule as QueueSchedule

        from runs.models import Run
        from schedules import execution
        from schedules.tasks import enqueue_occurrences

        seed(args.occurrences, due_in=args.due_in)
        QueueSchedule.objects.all().delete()  # this run ticks by hand, at the due moment
        connections.close_all()
        cluster = start_cluster(url, Q_WORKERS=str(args.workers))
        try:
            from schedules.models import Schedule

            due = Schedule.objects.order_by("next_occurrence_at").values_list(
                "next_occurrence_at", flat=True
            )[0]
            while timezone.now() < due:
                time.sleep(0.05)
            started = time.perf_counter()
            report = execution.materialize_due(enqueue=enqueue_occurrences)
            print(f"tick: {report} in {time.perf_counter() - started:.2f} s", flush=True)
            while (done := Run.objects.filter(status__in=Run.TERMINAL).count()) < args.occurrences:
                progress("runs finished", done, args.occurrences)
                time.sleep(1)
            progress("runs finished", args.occurrences, args.occurrences)
        finally:
            stop_cluster(cluster)

        runs = list(Run.objects.values("status", "started_at", "finished_at", "conversation__metadata"))
        statuses = {r["status"] for r in runs}
        first_start = min(r["started_at"] for r in runs)
        last_finish = max(r["finished_at"] for r in runs)
        cluster_rate = len(runs) / (last_finish - first_start).total_seconds()
        from datetime import datetime

        lags = [
            (
                r["started_at"] - datetime.fromisoformat(r["conversation__metadata"]["scheduled_for"])
            ).total_seconds()
            for r in runs
        ]

        print("baseline: the same number of runs executed in-process, one after another …", flush=True)
        from runs.models import Agent
        from runs.runtime import execute_run
        from runs.services import claim_run
        from tests.factories import start_interactive_run

        agent = Agent.objects.get(name="sim-research")
        owner_id = Run.objects.values_list("owner_id", flat=True)[0]
        sample = min(args.occurrences, 300)
        started = time.perf_counter()
        for _ in range(sample):
            run = start_interactive_run(owner_id, agent, "Research.")
            claim_run(run)
            execute_run(run, heartbeat=False)
        inline_rate = sample / (time.perf_counter() - started)

        print()
        print(f"statuses: {sorted(statuses)}")
        print(f"cluster ({args.workers} workers): {cluster_rate:.1f} runs/s over {len(runs)} runs")
        print(
            f"lag scheduled_for -> run start: p50 {percentile(lags, 0.5):.2f} s, "
            f"p99 {percentile(lags, 0.99):.2f} s, "
            f"max {max(lags):.2f} s, mean {statistics.mean(lags):.2f} s"
        )
        print(f"in-process, serial (baseline): {inline_rate:.1f} runs/s over {sample} runs")
        print(f"ratio cluster / in-process serial: {cluster_rate / inline_rate:.2f}")
        figure(
            f"{len(runs):,} runs of sim-research due at once, a {args.workers}-worker cluster",
            cluster_rate,
            "runs/s",
            baseline="the same runs in-process, one after another",
            baseline_value=inline_rate,
        )
        figure("their lag from the slot to the run's start, p50", percentile(lags, 0.5), "s")
        figure("their lag from the slot to the run's start, p99", percentile(lags, 0.99), "s")


if __name__ == "__main__":
    main()
