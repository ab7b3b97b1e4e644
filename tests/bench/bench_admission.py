"""Admission for one owner as their month of usage grows: the latency of one admission (reserve
in a transaction, as the tick and a message do, then release) and the throughput of 8 clients
admitting on that owner at once, at 1k / 10k / 100k / 1M ledger entries this month, next to
pgbench on the same server in the same run as the ceiling (a custom script with the same
lock-read-insert shape on one row, and pgbench's built-in simple-update).

    .venv/bin/python tests/bench/bench_admission.py [--clients 8] [--seconds 10]
        [--sizes 1000,10000,100000,1000000] [--quick]

Goal (issue: admission flat): at 1M entries within 1.5x of 1k, for latency and throughput.
Ledger entries are seeded with SQL, spread over the month so far (outside any schedule: a
schedule's key adds one rollup row per bucket, the same), with the spend rollups they add up to.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database, pgbench, pgbench_init, seed_rollups
from tests.bench.report import figure, parse_args

LEDGER_SQL = """
INSERT INTO accounting_ledgerentry (created_at, owner_id, run_id, schedule_id, provider, model,
                                    input_tokens, output_tokens, cost)
SELECT date_trunc('month', now()) + (now() - date_trunc('month', now()) - interval '1 minute')
           * (g::float / %(total)s::bigint),
       %(owner)s, g, NULL, 'anthropic', 'claude-research', 12000, 1500, 0.05 + (g %% 50) / 1000.0
FROM generate_series(%(first)s::bigint, %(last)s::bigint) g
"""


def admit_once(owner_id: int, run_id: int) -> None:
    from decimal import Decimal

    from django.db import transaction

    from accounting import ledger

    with transaction.atomic():
        ledger.reserve(owner_id, run_id=run_id, amount=Decimal("5.00"))
    ledger.release(run_id)  # the run ended: the row stays hot, the open total stays small


def client(
    url: str, owner_id: int, seconds: float, start: float, offset: int, results: multiprocessing.Queue
) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    while time.time() < start:
        time.sleep(0.001)
    done, run_id = 0, offset
    while time.time() < start + seconds:
        admit_once(owner_id, run_id)
        run_id += 1
        done += 1
    results.put(done)


def throughput(url: str, owner_id: int, clients: int, seconds: int, offset: int) -> float:
    from django.db import connections

    connections.close_all()
    results: multiprocessing.Queue = multiprocessing.Queue()
    start = time.time() + 2
    workers = [
        multiprocessing.Process(
            target=client, args=(url, owner_id, seconds, start, offset + 10_000_000 * (i + 1), results)
        )
        for i in range(clients)
    ]
    for worker in workers:
        worker.start()
    counts = [results.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    return sum(counts) / seconds


def latency(owner_id: int, count: int, offset: int) -> tuple[float, float]:
    times = []
    for index in range(count):
        started = time.perf_counter()
        admit_once(owner_id, offset + index)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def grow_ledger(owner_id: int, have: int, want: int, total: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(LEDGER_SQL, {"owner": owner_id, "first": have + 1, "last": want, "total": total})
    seed_rollups()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE accounting_ledgerentry")
        cursor.execute("VACUUM ANALYZE accounting_spendrollup")


def report(rows: list[tuple[int, float, float, float]], clients: int) -> None:
    """The BENCH lines: each size's p95 and throughput, next to the smallest size's (goal: flat)."""
    (first, _, first_p95, first_rate), *grown = rows
    figure(f"admission p95 at {first:,} ledger entries this month", first_p95, "ms")
    figure(f"admissions/s at {first:,} ledger entries, {clients} clients", first_rate, "/s")
    for size, _, p95, rate in grown:
        figure(
            f"admission p95 at {size:,} ledger entries this month",
            p95,
            "ms",
            baseline=f"at {first:,}",
            baseline_value=first_p95,
            goal="<= 1.5x (flat)",
            met=p95 <= 1.5 * first_p95,
        )
        figure(
            f"admissions/s at {size:,} ledger entries, {clients} clients",
            rate,
            "/s",
            baseline=f"at {first:,} (the ratio: how many times fewer)",
            baseline_value=first_rate,
            ratio=first_rate / rate,
            goal="<= 1.5x fewer (flat)",
            met=first_rate / rate <= 1.5,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--samples", type=int, default=500, help="single-client admissions per size")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    args = parse_args(parser, quick={"seconds": 2, "samples": 100, "sizes": "1000,10000"})
    sizes = [int(size) for size in args.sizes.split(",")]

    with bench_database("bench_admission") as url:
        from decimal import Decimal

        from django.contrib.auth.models import User

        from accounting import ledger

        owner = User.objects.create(username="busiest-owner")
        budget = ledger.budget_for(owner.pk)
        budget.daily_ceiling = budget.monthly_ceiling = Decimal("10000000")
        budget.save()

        rows = []
        have = 0
        for index, size in enumerate(sizes):
            print(f"{size:,} ledger entries this month: seeding …", end="", flush=True)
            started = time.perf_counter()
            grow_ledger(owner.pk, have, size, sizes[-1])
            have = size
            print(f" {time.perf_counter() - started:.1f} s; measuring …", flush=True)
            offset = 100_000_000 * (index + 1)
            latency(owner.pk, 50, offset)  # warm up
            p50, p95 = latency(owner.pk, args.samples, offset + 1000)
            rate = throughput(url, owner.pk, args.clients, args.seconds, offset + 10_000)
            rows.append((size, p50, p95, rate))

        print("baseline: pgbench, the same lock-read-insert shape on one row …", flush=True)
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE hot (id int PRIMARY KEY, spent numeric NOT NULL)")
            conn.execute("INSERT INTO hot VALUES (1, 0)")
            conn.execute("CREATE TABLE held (id bigserial PRIMARY KEY, amount numeric NOT NULL)")
        script = (
            "BEGIN;\n"
            "SELECT spent FROM hot WHERE id = 1 FOR UPDATE;\n"
            "SELECT coalesce(sum(amount), 0) FROM held WHERE id > (SELECT max(id) - 10 FROM held);\n"
            "INSERT INTO held (amount) VALUES (5.00);\n"
            "COMMIT;\n"
        )
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as handle:
            handle.write(script)
        same_shape = pgbench(url, args.clients, args.seconds, "-f", handle.name)
        same_shape_single = pgbench(url, 1, args.seconds, "-f", handle.name)
        print("baseline: pgbench built-in simple-update …", flush=True)
        pgbench_init(url)
        simple_update = pgbench(url, args.clients, args.seconds, "-N")

        print(f"\none owner, admission (reserve + release) as their month grows, {args.clients} clients:\n")
        print(f"{'ledger entries':>16}{'p50 ms':>9}{'p95 ms':>9}{'admissions/s':>14}")
        for size, p50, p95, rate in rows:
            print(f"{size:>16,}{p50:>9.2f}{p95:>9.2f}{rate:>14.0f}")
        first, last = rows[0], rows[-1]
        print(
            f"\n{last[0]:,} against {first[0]:,}: p95 {last[2] / first[2]:.2f}x, "
            f"throughput {first[3] / last[3]:.2f}x lower (goal: flat, at most 1.5x)"
        )
        print(f"\n{'baseline':52}{'per second':>12}{'latency ms':>12}")
        print(
            f"{'pgbench: lock one row, read, insert (1 client)':52}{same_shape_single['tps']:>12.0f}"
            f"{same_shape_single['latency_ms']:>12.2f}"
        )
        print(f"{f'pgbench: the same shape ({args.clients} clients)':52}{same_shape['tps']:>12.0f}")
        label = f"pgbench: built-in simple-update (-N, {args.clients} clients)"
        print(f"{label:52}{simple_update['tps']:>12.0f}")
        print(f"ours at {last[0]:,} / same-shape ceiling: {last[3] / same_shape['tps']:.2f}")
        report(rows, args.clients)
        figure(
            f"admissions/s at {last[0]:,} ledger entries, {args.clients} clients",
            last[3],
            "/s",
            baseline=f"pgbench, the same lock-read-insert shape on one row, {args.clients} clients",
            baseline_value=same_shape["tps"],
        )


if __name__ == "__main__":
    main()
