"""Does keeping the spend rollups serialize one owner's concurrent runs? 50 runs of one owner
write their steps (ledger entry, rollups, counters, transcript: the run loop's one statement) at
once, with the rollups and without them, measured in the same run.

    .venv/bin/python tests/bench/bench_rollup_contention.py [--runs 50] [--seconds 10] [--quick]

Two loads: paced, each run writing one step per second (as a busy owner's runs do: model calls
take about that long), where the question is the write's latency; and flat out, every run writing
steps back to back, where it is throughput. Every run adds to the same owner-total rollup rows,
the hottest rows there are. Each run is a thread with its own database connection.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database
from tests.bench.report import figure, parse_args


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=10)
    args = parse_args(parser, quick={"runs": 10, "seconds": 2})
    # Each run a connection of its own, as runs on several workers have (a process's pool would
    # otherwise hand its few connections to the runs in turn: config/settings.py).
    os.environ["DATABASE_POOL_SIZE"] = str(min(100, args.runs + 2))
    with bench_database("bench_rollup_contention"):
        loops = setup(args.runs)
        rows = []
        for label, rollups in (("with the rollups", True), ("without them", False)):
            for load, pace in (("paced, 1 step/s per run", 1.0), ("flat out", 0.0)):
                rows.append((label, load, *drive(loops, args.seconds, pace=pace, rollups=rollups)))
        print(f"\n{args.runs} concurrent runs of one owner, {args.seconds} s each:\n")
        print(f"{'':18}{'load':26}{'steps/s':>10}{'p50 ms':>9}{'p95 ms':>9}")
        for label, load, rate, p50, p95 in rows:
            print(f"{label:18}{load:26}{rate:>10.0f}{p50:>9.2f}{p95:>9.2f}")
        with_flat, without_flat = rows[1][2], rows[3][2]
        print(f"\nflat out, with the rollups / without: {with_flat / without_flat:.2f} of the throughput")
        paced, paced_without = rows[0], rows[2]
        figure(
            f"{args.runs} runs of one owner at 1 step/s each: steps/s",
            paced[2],
            "steps/s",
            baseline="the same without the rollups",
            baseline_value=paced_without[2],
            goal=">= 0.95x (not serialized at real load)",
            met=paced[2] >= 0.95 * paced_without[2],
        )
        figure(
            "their step's write at 1 step/s, p95",
            paced[4],
            "ms",
            baseline="the same without the rollups",
            baseline_value=paced_without[4],
        )
        figure(
            f"{args.runs} runs of one owner flat out: steps/s",
            with_flat,
            "steps/s",
            baseline="the same without the rollups",
            baseline_value=without_flat,
        )


def setup(count: int) -> list[Any]:
    from django.contrib.auth.models import User

    from runs.limits import RunLimits
    from runs.models import Agent, Conversation, Run
    from runs.providers import client_for
    from runs.runtime import _Loop

    owner = User.objects.create_user("busy-owner")
    limits = RunLimits(
        max_steps=10_000,
        max_model_calls=10_000,
        max_tool_calls=10_000,
        max_cost="99999.00",
        synthesis_reserve_steps=0,
        synthesis_reserve_model_calls=0,
        synthesis_reserve_tool_calls=0,
        synthesis_reserve_cost="0",
    )
    agent = Agent.objects.create(
        name="sim",
        provider="simulated",
        model="sim-research",
        tools=[],
        prices={"input": "3.00", "output": "15.00"},
        default_limits=limits.to_json(),
    )
    loops = []
    for index in range(count):
        conversation = Conversation.objects.create(owner=owner, title=f"run {index}")
        run = Run.objects.create(
            owner=owner,
            conversation=conversation,
            agent=agent,
            prompt="p",
            limits=limits.to_json(),
            status=Run.Status.RUNNING,
            attempt=uuid.uuid4(),
        )
        client = client_for(agent)
        loop = _Loop(run, client, client, time.sleep)
        loop.seq = 10_000_000  # past anything the loop itself wrote
        loops.append(loop)
    return loops


def drive(loops: list[Any], seconds: int, *, pace: float, rollups: bool) -> tuple[float, float, float]:
    from django.db import connection
    from django.utils import timezone

    from accounting import ledger
    from runs.models import TranscriptEntry
    from runs.steps import step_statement, write_step

    real_ctes = ledger.usage_ctes

    def without_rollups(call: Any, *, when: str) -> tuple[list[str], list[Any]]:
        ctes, params = real_ctes(call, when=when)
        return ctes[:1], params[: ctes[0].count("%s")]  # the ledger entry alone

    ledger.usage_ctes = real_ctes if rollups else without_rollups  # type: ignore[assignment]
    latencies: list[float] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    start = threading.Barrier(len(loops))

    def writer(loop: Any) -> None:
        mine: list[float] = []
        try:
            start.wait()
            while time.monotonic() < stop:
                loop.seq += 1  # transcript positions go on from one load to the next
                usage = ledger.Call(
                    owner_id=loop.run.owner_id,
                    run_id=loop.run.pk,
                    schedule_id=None,
                    provider="simulated",
                    model="sim-research",
                    input_tokens=1200,
                    output_tokens=150,
                    cost=Decimal("0.005850"),
                    at=timezone.now(),
                    charged_by_kind={"input": Decimal("0.003600"), "output": Decimal("0.002250")},
                )
                row = TranscriptEntry(
                    run=loop.run, seq=loop.seq, step=1, role="assistant", content="x", tool_calls=[]
                )
                began = time.perf_counter()
                assert write_step(step_statement(loop.run, loop.attempt, loop.ancestors, usage, 0, [row]))
                mine.append((time.perf_counter() - began) * 1000)
                if pace:
                    time.sleep(max(0.0, pace - (time.perf_counter() - began)))
        except BaseException as exc:
            failures.append(exc)
            start.abort()  # the others stop waiting for this one
        finally:
            connection.close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=writer, args=(loop,)) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ledger.usage_ctes = real_ctes  # type: ignore[assignment]
    real_failures = [f for f in failures if not isinstance(f, threading.BrokenBarrierError)]
    if real_failures:
        raise RuntimeError(f"{len(real_failures)} of the runs failed to write a step") from real_failures[0]
    latencies.sort()
    p95 = latencies[max(0, int(len(latencies) * 0.95) - 1)]
    return len(latencies) / seconds, statistics.median(latencies), p95


if __name__ == "__main__":
    main()
