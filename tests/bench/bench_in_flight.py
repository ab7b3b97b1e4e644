"""Runs in flight: N one-time schedules of one owner due in the same second, each run one model
call that waits D seconds on the simulated provider (sim-slow), plus one run of another owner due
with them, executed by a real django-q2 cluster with the project's defaults.

Prints the makespan (slot to the last run's end) against the ideal (D: every run waits at once),
lag to start p50/p99, the other owner's lag to start, and the cluster's peak resident memory and
peak database connections. With --baseline, the same burst again with one run in flight per
worker (RUNS_IN_FLIGHT_PER_WORKER=1: a run holds its worker while it waits, as before).

    .venv/bin/python tests/bench/bench_in_flight.py [--runs 10,200,1000] [--delay 2] [--words 100]
        [--baseline] [--quick]

Each answer streams (docs/decisions/0006-streaming.md): `--words` chunks more than the short answer,
spread over the delay.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("MAX_ACTIVE_SCHEDULES", "100000")
from tests.bench._setup import bench_database, progress, start_cluster, stop_cluster, watch_runs
from tests.bench.report import figure, parse_args


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def seed(count: int, delay: float, run_at: datetime, tag: str, words: int) -> list[int]:
    from django.db import transaction

    from runs.models import Agent
    from tests.factories import make_agent

    agent = Agent.objects.filter(name="sim-slow").first() or make_agent("sim-slow", model="sim-slow")
    # Each answer streams `words` chunks more over the delay (a provider writing ~50 tokens a second).
    prompt = f"Wait on the provider: delay={delay} words={words}"
    # One transaction: on a server that waits for the disk, a commit per schedule took the burst
    # past its slot before it was seeded.
    with transaction.atomic():
        return [
            seed_owner(name, runs, agent.name, prompt, run_at)
            for name, runs in ((f"busy-{tag}", count), (f"other-{tag}", 1))
        ]


def seed_owner(name: str, runs: int, agent: str, prompt: str, run_at: datetime) -> int:
    from decimal import Decimal

    from django.contrib.auth.models import User

    from accounting import ledger
    from schedules.schemas import parse_create
    from schedules.services import create_schedule

    owner = User.objects.create(username=name)
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = budget.monthly_ceiling = budget.schedule_cost_ceiling = Decimal("100000")
    budget.save()
    for index in range(runs):
        data = {"title": f"Briefing {index}", "prompt": prompt, "agent": agent, "run_at": run_at}
        create_schedule(owner, parse_create(data), via="bench")
        if (index + 1) % 200 == 0:
            progress(f"seeding {name}'s one-time schedules", index + 1, runs)
    return owner.pk


def cluster_rss_mb(pgid: int) -> float:
    """Resident memory of every process in the cluster's process group, MB."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) != pgid:  # field 5: the process group
                continue
            total += int(stat[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: resident pages
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e6


def burst(url: str, *, runs: int, delay: float, words: int, env: dict[str, str]) -> dict[str, float]:
    import psycopg
    from django.db import connections
    from django.utils import timezone
    from django_q.models import Schedule as QueueSchedule

    from runs.models import Run

    tag = str(time.monotonic_ns())
    # The slot leaves time to seed the burst (a schedule is a few writes) and start the cluster.
    run_at = timezone.now() + timedelta(seconds=20 + runs * 0.02)
    owners = seed(runs, delay, run_at, tag, words)
    # Only the cluster's waker ticks (schedules.waker): at the slot, not at django-q2's next minute.
    QueueSchedule.objects.all().delete()
    connections.close_all()
    cluster = start_cluster(url, **env)
    peak_rss = peak_connections = 0.0
    watcher = psycopg.connect(url, autocommit=True)
    try:
        for in_use in watch_runs(watcher, owners, runs + 1):  # the cluster's connections
            peak_connections = max(peak_connections, in_use)
            peak_rss = max(peak_rss, cluster_rss_mb(cluster.pid))
    finally:
        watcher.close()
        stop_cluster(cluster)
    ours = Run.objects.filter(owner_id__in=owners)
    rows = list(ours.values("status", "owner_id", "started_at", "finished_at"))
    slot = min(
        datetime.fromisoformat(m["scheduled_for"])
        for m in ours.values_list("conversation__metadata", flat=True)
    )
    lags = [(r["started_at"] - slot).total_seconds() for r in rows if r["owner_id"] == owners[0]]
    took = [(r["finished_at"] - r["started_at"]).total_seconds() for r in rows]
    other = next(r for r in rows if r["owner_id"] == owners[1])
    return {
        "completed": sum(r["status"] == "completed" for r in rows),
        "runs": len(rows),
        "makespan": (max(r["finished_at"] for r in rows) - slot).total_seconds(),
        "p50": percentile(lags, 0.5),
        "p99": percentile(lags, 0.99),
        "other": (other["started_at"] - slot).total_seconds(),
        "took50": percentile(took, 0.5),
        "took_most": max(took),
        "rss": peak_rss,
        "connections": peak_connections,
    }


def show(label: str, figures: dict[str, float], delay: float) -> None:
    print(
        f"{label}: {figures['completed']:.0f}/{figures['runs']:.0f} completed; makespan "
        f"{figures['makespan']:.1f} s ({figures['makespan'] / delay:.1f}x the ideal {delay:g} s); "
        f"lag to start p50 {figures['p50']:.2f} s, p99 {figures['p99']:.2f} s; "
        f"start to end p50 {figures['took50']:.2f} s, longest {figures['took_most']:.2f} s; "
        f"other owner's run started after "
        f"{figures['other']:.2f} s; cluster peak {figures['rss']:.0f} MB resident, "
        f"{figures['connections']:.0f} database connections",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default="10,200,1000", help="runs due at once, one burst each")
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--words", type=int, default=100, help="chunks each answer streams, over the delay")
    parser.add_argument("--baseline", action="store_true", help="also with one run in flight per worker")
    args = parse_args(parser, quick={"runs": "10"})
    sizes = [int(size) for size in args.runs.split(",")]

    with bench_database("bench_in_flight") as url:
        results = [
            (runs, burst(url, runs=runs, delay=args.delay, words=args.words, env={})) for runs in sizes
        ]
        print()
        for runs, figures in results:
            show(f"{runs} runs, defaults", figures, args.delay)
        if args.baseline:
            runs, figures = results[-1]
            base = burst(
                url, runs=runs, delay=args.delay, words=args.words, env={"RUNS_IN_FLIGHT_PER_WORKER": "1"}
            )
            show(f"{runs} runs, one in flight per worker (baseline)", base, args.delay)
            print(f"makespan ratio baseline / defaults: {base['makespan'] / figures['makespan']:.1f}x")
        for runs, figures in results:
            report(runs, figures, args.delay)


# The goals of decision 0005 (docs/decisions/0005-runs-in-flight.md), by the size of the burst.
MAKESPAN_GOALS = {10: 2.3, 200: 8.0, 1000: 30.0}


def report(runs: int, figures: dict[str, float], delay: float) -> None:
    """The BENCH lines of one burst."""
    goal = MAKESPAN_GOALS.get(runs)
    figure(
        f"{runs:,} runs due at once, each a {delay:g} s provider call: the last ends after",
        figures["makespan"],
        "s",
        baseline="the ideal: every run waits at once",
        baseline_value=delay,
        goal=f"<= {goal:g} s" if goal else None,
        met=figures["makespan"] <= goal if goal else None,
    )
    figure(f"{runs:,} runs: lag from the slot to the start, p99", figures["p99"], "s")
    figure(
        f"{runs:,} runs: another owner's run starts after",
        figures["other"],
        "s",
        goal="<= 3 s",
        met=figures["other"] <= 3,
    )
    figure(
        f"{runs:,} runs: the cluster's peak memory",
        figures["rss"],
        "MB",
        goal="<= 1 GiB",
        met=figures["rss"] <= 1024,
    )
    figure(
        f"{runs:,} runs: the cluster's peak database connections",
        figures["connections"],
        "",
        goal="<= 20",
        met=figures["connections"] <= 20,
    )


if __name__ == "__main__":
    main()
