"""Many hosts, one database: N one-time schedules of ten owners due together, each run one model call
that waits D seconds on the simulated provider (sim-slow), executed by three django-q2 clusters
("hosts", each with the project's defaults and its own WORKER_HOST) on one PostgreSQL; and, as the
baseline measured in the same run, the same burst on one host.

Prints the makespan (slot to the last run's end), runs per second, the runs each host ran, and the
peak number of connections to the database (pg_stat_activity), then one `BENCH {...}` line per
figure for the bench runner.

    .venv/bin/python tests/bench/bench_hosts.py [--runs 3000] [--quick] [--delay 2]
        [--baseline-runs N]

--quick: 300 runs. The hosts here share one machine's cores with PostgreSQL: on separate machines
each would have its own, so the figure is what three clusters cost on one database, not what
three machines gain.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("MAX_ACTIVE_SCHEDULES", "100000")
from tests.bench._setup import bench_database, progress, start_cluster, stop_cluster, watch_runs

OWNERS = 10


def seed(count: int, delay: float, tag: str) -> tuple[list[int], list[int]]:
    """`count` one-time schedules spread over ten new owners; their slot comes later (`due_now`)."""
    from decimal import Decimal

    from django.contrib.auth.models import User
    from django.utils import timezone

    from accounting import ledger
    from runs.models import Agent
    from schedules.schemas import parse_create
    from schedules.services import create_schedule
    from tests.factories import make_agent

    agent = Agent.objects.filter(name="sim-slow").first() or make_agent("sim-slow", model="sim-slow")
    owners = []
    for index in range(OWNERS):
        owner = User.objects.create(username=f"owner-{index}-{tag}")
        budget = ledger.budget_for(owner.pk)
        budget.daily_ceiling = budget.monthly_ceiling = budget.schedule_cost_ceiling = Decimal("100000")
        budget.save()
        owners.append(owner)
    later = timezone.now() + timedelta(hours=1)
    prompt = f"Wait on the provider: delay={delay}"
    schedules = []
    for index in range(count):
        data = {"title": f"Briefing {index}", "prompt": prompt, "agent": agent.name, "run_at": later}
        schedules.append(create_schedule(owners[index % OWNERS], parse_create(data), via="bench").pk)
        if (index + 1) % 100 == 0:
            progress("seeding one-time schedules", index + 1, count)
    return [owner.pk for owner in owners], schedules


def burst(url: str, *, hosts: int, runs: int, delay: float) -> dict[str, Any]:
    import psycopg
    from django.conf import settings
    from django.db import connections

    from runs.models import Run
    from schedules import waker

    tag = str(time.monotonic_ns())
    seeding = time.monotonic()
    owners, schedules = seed(runs, delay, tag)
    print(f"  seeded {runs:,} schedules in {time.monotonic() - seeding:.0f} s", flush=True)
    for alias in connections:  # this process's pooled connections too: only the hosts' are counted
        connections[alias].close_pool()
    database = urlsplit(url).path.lstrip("/")
    started = [start_cluster(url, WORKER_HOST=f"host-{index + 1}") for index in range(hosts)]
    watcher = psycopg.connect(url, autocommit=True)
    peak_connections = 0
    try:
        listening = hosts * settings.Q_WORKERS  # one waker per worker process
        while (
            watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
                [waker.APPLICATION_NAME, database],
            ).fetchone()[0]
            < listening
        ):
            time.sleep(0.2)
        # The slot: every schedule due now, together (each host's waker is told and ticks).
        slot = watcher.execute(
            "UPDATE schedules_schedule SET next_occurrence_at = now() WHERE id = ANY(%s) RETURNING now()",
            [schedules],
        ).fetchone()[0]
        for in_use in watch_runs(watcher, owners, runs):
            peak_connections = max(peak_connections, in_use)
    finally:
        watcher.close()
        for host in started:
            stop_cluster(host)
    ours = Run.objects.filter(owner_id__in=owners)
    rows = list(ours.values("status", "finished_at", "worker"))
    makespan = (max(row["finished_at"] for row in rows) - slot).total_seconds()
    per_host: dict[str, int] = {}
    for row in rows:
        host = row["worker"].rsplit(":", 1)[0]
        per_host[host] = per_host.get(host, 0) + 1
    return {
        "runs": len(rows),
        "completed": sum(row["status"] == "completed" for row in rows),
        "makespan": makespan,
        "rate": len(rows) / makespan,
        "connections": peak_connections,
        "per_host": dict(sorted(per_host.items())),
    }


def show(label: str, figures: dict[str, Any]) -> None:
    print(
        f"{label}: {figures['completed']}/{figures['runs']} completed; makespan "
        f"{figures['makespan']:.1f} s, {figures['rate']:.1f} runs/s; peak "
        f"{figures['connections']} database connections; runs per host {figures['per_host']}",
        flush=True,
    )


def bench_line(figure: str, value: float, unit: str, baseline: str, baseline_value: float) -> None:
    line = {
        "bench": "bench_hosts",
        "figure": figure,
        "value": round(value, 1),
        "unit": unit,
        "baseline": baseline,
        "baseline_value": round(baseline_value, 1),
        "ratio": round(value / baseline_value, 2) if baseline_value else None,
        "goal": None,
        "met": None,
    }
    print(f"BENCH {json.dumps(line)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--quick", action="store_true", help="300 runs")
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--baseline-runs", type=int, help="the one-host baseline's runs (default: the same)")
    args = parser.parse_args()
    runs = 300 if args.quick else args.runs
    base_runs = args.baseline_runs or runs

    with bench_database("bench_hosts") as url:
        many = burst(url, hosts=args.hosts, runs=runs, delay=args.delay)
        one = burst(url, hosts=1, runs=base_runs, delay=args.delay)
        print()
        show(f"{args.hosts} hosts x {runs:,} runs", many)
        show(f"1 host x {base_runs:,} runs (baseline)", one)
        same = "one host, same runs" if base_runs == runs else f"one host, {base_runs:,} runs"
        label = f"{args.hosts} hosts x {runs:,} runs"
        bench_line(f"makespan, {label}", many["makespan"], "s", same, one["makespan"])
        bench_line(f"runs per second, {label}", many["rate"], "runs/s", same, one["rate"])
        peak = many["connections"], one["connections"]
        bench_line(f"peak PostgreSQL connections, {label}", peak[0], "connections", same, peak[1])


if __name__ == "__main__":
    main()
