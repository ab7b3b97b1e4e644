"""Admission on one hot budget row: 8 concurrent clients admitting (and releasing) runs for the
same owner, next to pgbench on the same server in the same run as the ceiling: a custom script
with the same lock-read-insert shape on one row, and pgbench's built-in simple-update.

    .venv/bin/python tests/bench/bench_admission.py [--clients 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database
from tests.bench._setup import pgbench as shared_pgbench


def client(
    url: str, owner_id: int, seconds: float, start: float, offset: int, results: multiprocessing.Queue
) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from decimal import Decimal

    from django.db import transaction

    from accounting import ledger

    while time.time() < start:
        time.sleep(0.001)
    done, run_id = 0, offset
    while time.time() < start + seconds:
        with transaction.atomic():
            ledger.reserve(owner_id, run_id=run_id, amount=Decimal("5.00"))
        ledger.release(run_id)  # the run ended: the row stays hot, the open total stays small
        run_id += 1
        done += 1
    results.put(done)


def pgbench(url: str, clients: int, seconds: int, *extra: str) -> float:
    return shared_pgbench(url, clients, seconds, *extra)["tps"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()

    with bench_database("bench_admission") as url:
        from decimal import Decimal

        from django.contrib.auth.models import User

        from accounting import ledger

        owner = User.objects.create(username="hot")
        budget = ledger.budget_for(owner.pk)
        budget.daily_ceiling = budget.monthly_ceiling = Decimal("1000000")
        budget.save()
        from django.db import connections

        connections.close_all()

        print(
            f"ours: {args.clients} clients admitting runs on one owner's budget row for {args.seconds} s …",
            flush=True,
        )
        results: multiprocessing.Queue = multiprocessing.Queue()
        start = time.time() + 2
        workers = [
            multiprocessing.Process(
                target=client, args=(url, owner.pk, args.seconds, start, 1_000_000 * (i + 1), results)
            )
            for i in range(args.clients)
        ]
        for worker in workers:
            worker.start()
        counts = [results.get(timeout=args.seconds + 60) for _ in workers]
        for worker in workers:
            worker.join()
        ours = sum(counts) / args.seconds

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
        print("baseline: pgbench built-in simple-update …", flush=True)
        subprocess.run(["pgbench", "-i", "-q", "-s", "1", url], capture_output=True, check=True)
        simple_update = pgbench(url, args.clients, args.seconds, "-N")

        print()
        print(f"{'':52}{'per second':>12}")
        print(f"{'ours: admit + release through accounting.ledger':52}{ours:>12.0f}")
        print(f"{'pgbench: lock one row, read, insert (same shape)':52}{same_shape:>12.0f}")
        print(f"{'pgbench: built-in simple-update (-N)':52}{simple_update:>12.0f}")
        print(f"ours / same-shape ceiling: {ours / same_shape:.2f}")


if __name__ == "__main__":
    main()
