"""Dashboard pages on large tables: query count and server time for the owner's schedules list,
a schedule detail, a run detail and the budget page, next to the Django admin changelist for
runs on the same data, measured in the same run.

    .venv/bin/python tests/bench/bench_dashboard.py [--schedules 10000] [--runs 1000000]
        [--owner-schedules 1000] [--requests 50] [--keep]

Seeds (INSERT ... SELECT generate_series) 10,000 schedules, 1,000,000 runs, each with its
conversation, occurrence, schedule.run_accounted event and ledger entry, over 100 days. One
owner, the one measured, holds --owner-schedules of the schedules (and their runs and spend);
the rest belong to other owners, ten each. Requests go through the whole Django stack
(middleware, sessions, context processors, templates) with the test client, so "server time" is
what a request costs in the process, without the network.

DATABASE_URL names the server (default postgres://postgres@127.0.0.1:5432/postgres); the script
creates the database bench_dashboard and drops it at the end unless --keep.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database

DAYS = 100
PER_OTHER_OWNER = 10
# Run g: schedule ((g - 1) % schedules) + 1, on day (g - 1) / schedules of the last DAYS; every
# 7th run fails. Each schedule's owner: owner 1 (measured) for the first `owned`, else ten a piece.
FRAGMENTS = {
    "slot": """(date_trunc('day', now()) - ($days - 1 - (g - 1) / $schedules) * interval '1 day'
        + interval '6 hours' + ((g - 1) % $schedules % 600) * interval '1 minute')""",
    "owner": """CASE WHEN (g - 1) % $schedules + 1 <= $owned THEN 1
        ELSE 2 + ((g - 1) % $schedules + 1 - $owned - 1) / $per_other END""",
    "schedule": "((g - 1) % $schedules + 1)",
    "failed": "g % 7 = 0",
}


def step(label: str, sql: str, params: dict[str, Any]) -> None:
    """Run `sql` (statements separated by ";" at line ends) with $name filled from trusted
    integers and a JSON literal: server-side binding takes one statement at a time."""
    from django.db import connection

    started = time.perf_counter()
    print(f"  {label} …", end="", flush=True)
    with connection.cursor() as cursor:
        filled = Template(Template(sql).safe_substitute(FRAGMENTS)).substitute(params)
        for statement in filled.split(";\n"):
            if statement.strip():
                cursor.execute(statement)
    print(f" {time.perf_counter() - started:.1f} s", flush=True)


def seed(schedules: int, runs: int, owner_schedules: int) -> dict[str, int]:
    from django.contrib.auth.models import User
    from django.db import connection

    from tests.factories import limits

    others = -(-(schedules - owner_schedules) // PER_OTHER_OWNER)
    print(
        f"seeding {schedules} schedules, {runs} runs, {runs} ledger entries, {others + 1} owners:", flush=True
    )
    limits_json = limits(
        synthesis_reserve_steps=2, synthesis_reserve_model_calls=2, synthesis_reserve_cost="1.00"
    ).model_dump_json()
    params: dict[str, Any] = {
        "schedules": schedules,
        "runs": runs,
        "owned": owner_schedules,
        "per_other": PER_OTHER_OWNER,
        "users": others + 1,
        "days": DAYS,
        "limits": "'" + limits_json.replace("'", "''") + "'",
    }
    step(
        "owners and budgets",
        """
        INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name, email,
                               is_staff, is_active, date_joined)
        SELECT g, '!', false, CASE WHEN g = 1 THEN 'bench-owner' ELSE 'owner' || g END, '', '', '',
               false, true, now()
        FROM generate_series(1, $users) g;
        INSERT INTO accounting_ownerbudget (owner_id, timezone, daily_ceiling, monthly_ceiling, updated_at)
        SELECT g, 'Europe/Riga', 100000, 1000000, now() FROM generate_series(1, $users) g;
        INSERT INTO runs_agent (id, name, provider, model, base_url, api_key_setting, system_prompt, tools,
                                input_price_per_mtok, output_price_per_mtok, default_limits, cost_limit,
                                is_active, created_at)
        VALUES (1, 'researcher', 'anthropic', 'claude-research', '', 'ANTHROPIC_API_KEY', '', '[]',
                3, 15, $limits::jsonb, NULL, true, now());
        """,
        params,
    )
    # Schedule g belongs to owner 1 while g <= owned, else to one of the other owners, ten each.
    step(
        "schedules and their revisions",
        """
        INSERT INTO schedules_schedule (id, owner_id, title, kind, status, consecutive_failures,
                                        next_occurrence_at, created_at)
        SELECT g,
               CASE WHEN g <= $owned THEN 1 ELSE 2 + (g - $owned - 1) / $per_other END,
               'Research briefing ' || lpad(g::text, 5, '0'), 'recurring',
               CASE WHEN g % 50 = 7 THEN 'completed' ELSE 'active' END,
               CASE WHEN g % 10 = 0 THEN 2 WHEN g % 3 = 0 THEN 1 ELSE 0 END,
               date_trunc('day', now()) + interval '1 day 6 hours' + (g % 600) * interval '1 minute',
               now() - $days * interval '1 day'
        FROM generate_series(1, $schedules) g;
        INSERT INTO schedules_schedulerevision (id, schedule_id, number, created_at, created_by_id, path, via,
                                                reason, title, prompt, cron, timezone, run_at, agent_id,
                                                limits, max_consecutive_failures)
        SELECT g, g, 1, now() - $days * interval '1 day', NULL, 'schedule.create', 'bench', '',
               'Research briefing ' || lpad(g::text, 5, '0'),
               'Research what changed since yesterday and write a five-point briefing.',
               (g % 60) || ' 9 * * *', 'Europe/Riga', NULL, 1, $limits::jsonb, 2
        FROM generate_series(1, $schedules) g;
        UPDATE schedules_schedule SET current_revision_id = id;
        """,
        params,
    )
    step(
        "conversations",
        """
        INSERT INTO runs_conversation (id, owner_id, title, metadata, created_at)
        SELECT g, $owner, 'Research briefing — run ' || g,
               jsonb_build_object('schedule_id', $schedule, 'occurrence_id', g), $slot
        FROM generate_series(1, $runs) g;
        """,
        params,
    )
    step(
        "runs",
        """
        INSERT INTO runs_run (
            id, owner_id, conversation_id, agent_id, kind, parent_id, prompt, status, limits,
            steps, model_calls, tool_calls, cost, synthesis_dimension, synthesis_step, answer,
            failure_reason, error_class, failure_dimension, transient, provider, provider_code,
            http_status, provider_parameter, failure_message, created_at, started_at,
            finished_at, heartbeat_at)
        SELECT g, $owner, g, 1, 'interactive', NULL, 'Research what changed since yesterday.',
               CASE WHEN $failed THEN 'failed' ELSE 'completed' END, $limits::jsonb,
               CASE WHEN $failed THEN 0 ELSE 3 END, CASE WHEN $failed THEN 0 ELSE 3 END,
               CASE WHEN $failed THEN 0 ELSE 2 END,
               CASE WHEN $failed THEN 0 ELSE 0.05 + (g % 50) / 1000.0 END,
               CASE WHEN g % 11 = 0 THEN 'model_calls' ELSE '' END, CASE WHEN g % 11 = 0 THEN 3 END,
               CASE WHEN $failed THEN '' ELSE 'Briefing: five points.' END,
               CASE WHEN $failed THEN 'provider_error' ELSE '' END,
               CASE WHEN $failed THEN 'ProviderTransientError' ELSE '' END, '',
               CASE WHEN $failed THEN true END,
               CASE WHEN $failed THEN 'anthropic' ELSE '' END,
               CASE WHEN $failed THEN 'overloaded_error' ELSE '' END,
               CASE WHEN $failed THEN 529 END, '',
               CASE WHEN $failed THEN 'Overloaded' ELSE '' END,
               $slot, $slot, $slot + interval '40 seconds', $slot + interval '40 seconds'
        FROM generate_series(1, $runs) g;
        """,
        params,
    )
    step(
        "occurrences",
        """
        INSERT INTO schedules_occurrence (id, schedule_id, scheduled_for, revision_id, outcome, run_id,
                                          created_at, claimed_at, finished_at)
        SELECT g, $schedule, $slot, $schedule, CASE WHEN $failed THEN 'failed' ELSE 'completed' END, g,
               $slot, $slot, $slot + interval '40 seconds'
        FROM generate_series(1, $runs) g;
        """,
        params,
    )
    step(
        "schedule.run_accounted events",
        """
        INSERT INTO accounting_accountingevent (id, event, created_at, owner_id, schedule_id, run_id, payload)
        SELECT g, 'schedule.run_accounted', $slot + interval '40 seconds', $owner, $schedule, g,
               jsonb_build_object(
                 'event', 'schedule.run_accounted', 'schedule_id', $schedule, 'occurrence_id', g,
                 'scheduled_for', to_char(($slot) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
                 'revision', 1, 'run_id', g,
                 'status', CASE WHEN $failed THEN 'failed' ELSE 'completed' END,
                 'usage', jsonb_build_object('steps', 3, 'model_calls', 3, 'tool_calls', 2, 'cost', '0.06'),
                 'failure', CASE WHEN $failed THEN jsonb_build_object(
                   'reason', 'provider_error', 'error_class', 'ProviderTransientError',
                   'provider', 'anthropic', 'provider_code', 'overloaded_error', 'http_status', 529)
                 ELSE 'null'::jsonb END)
        FROM generate_series(1, $runs) g;
        """,
        params,
    )
    step(
        "ledger entries",
        """
        INSERT INTO accounting_ledgerentry (id, created_at, owner_id, run_id, schedule_id, provider, model,
                                            input_tokens, output_tokens, cost)
        SELECT g, $slot + interval '20 seconds', $owner, g, $schedule, 'anthropic', 'claude-research',
               12000, 1500, 0.05 + (g % 50) / 1000.0
        FROM generate_series(1, $runs) g;
        """,
        params,
    )
    step(
        "transcripts of the measured owner's runs (6 entries each)",
        """
        INSERT INTO runs_transcriptentry (
            run_id, seq, step, role, content, tool_calls, tool_call_id, tool_name, is_error, created_at)
        SELECT r.id, s.seq, (s.seq + 1) / 2,
               CASE WHEN s.seq = 0 THEN 'user' WHEN s.seq % 2 = 1 THEN 'assistant' ELSE 'tool' END,
               CASE WHEN s.seq = 5 THEN 'Briefing: five points.'
                    WHEN s.seq % 2 = 0 THEN 'result ' || s.seq ELSE '' END,
               CASE WHEN s.seq IN (1, 3) THEN '[{"id": "c1", "name": "web.search", "arguments": "{}"}]'::jsonb
                    ELSE '[]'::jsonb END,
               '', CASE WHEN s.seq IN (2, 4) THEN 'web.search' ELSE '' END, false, r.created_at
        FROM runs_run r CROSS JOIN generate_series(0, 5) AS s(seq)
        WHERE r.owner_id = 1;
        """,
        params,
    )
    step(
        "pauses, last events, open reservations",
        """
        INSERT INTO schedules_pauseevent (
            id, schedule_id, action, reason, actor_id, run_id, failures_at_event, failure_limit, detail,
            created_at)
        SELECT s.id, s.id, 'pause', 'failure_limit', NULL, NULL, 2, 2, '', now() - interval '1 hour'
        FROM schedules_schedule s WHERE s.id % 10 = 0;
        UPDATE schedules_schedule SET status = 'paused', pause_id = id WHERE id % 10 = 0;
        UPDATE schedules_schedule s SET last_event_id = e.newest
        FROM (SELECT schedule_id, max(id) AS newest FROM accounting_accountingevent GROUP BY schedule_id) e
        WHERE e.schedule_id = s.id;
        INSERT INTO accounting_reservation (owner_id, run_id, amount, created_at, released_at)
        SELECT 1, id, 5, now(), NULL FROM runs_run WHERE owner_id = 1 ORDER BY id DESC LIMIT 3;
        """,
        params,
    )
    with connection.cursor() as cursor:
        # Rows were inserted with explicit ids; move each sequence past them. Table names are ours.
        for table in (
            "auth_user",
            "runs_agent",
            "schedules_schedule",
            "schedules_schedulerevision",
            "runs_conversation",
            "runs_run",
            "schedules_occurrence",
            "accounting_accountingevent",
            "accounting_ledgerentry",
            "schedules_pauseevent",
        ):
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"  # noqa: S608
            )
    # An append-only table is vacuumed by autovacuum in production; the seeded one is vacuumed here.
    step("VACUUM ANALYZE", "VACUUM ANALYZE", {})
    User.objects.create_superuser("bench-admin", password="bench-admin-password")
    paused = 10  # schedule 10 is the measured owner's and paused (g % 10 = 0)
    failed_run = next(
        r for r in range(runs, 0, -1) if r % 7 == 0 and (r - 1) % schedules + 1 <= owner_schedules
    )
    return {"paused_schedule": paused, "failed_run": failed_run}


def stock_runs_admin() -> str:
    """The runs changelist as Django's defaults would have it (table ordering, full count,
    filters over free-text columns), mounted beside ours to compare on the same data."""
    from django.contrib import admin
    from django.urls import path

    from config import urls
    from runs.admin import RunAdmin
    from runs.models import Run

    site = admin.AdminSite(name="stock")

    class StockRunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
        list_display = RunAdmin.list_display  # the same columns, Django's defaults otherwise
        list_select_related = ("owner", "agent")
        list_filter = ("status", "kind", "failure_reason", "error_class", "provider")
        search_fields = ("=id",)

    site.register(Run, StockRunAdmin)
    module = types.ModuleType("bench_dashboard_urls")
    module.urlpatterns = [path("stock-admin/", site.urls), *urls.urlpatterns]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module.__name__


def measure(label: str, get: Callable[[], Any], requests: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(3):  # warm the template cache and the database's buffers
        response = get()
        assert response.status_code == 200, (label, response.status_code)
    connection.queries_log.clear()  # a full log (maxlen) would make the capture look empty
    with CaptureQueriesContext(connection) as captured:
        get()
    queries = [q["sql"].upper() for q in captured.captured_queries]
    # A read of the whole table: a COUNT or a SELECT DISTINCT with neither WHERE nor LIMIT.
    whole = [
        sql
        for sql in queries
        if ("COUNT(" in sql or sql.startswith("SELECT DISTINCT"))
        and "WHERE" not in sql
        and "LIMIT" not in sql
    ]
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        get()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "label": label,
        "queries": len(queries),
        "whole_table": len(whole),
        "p50": statistics.median(times),
        "p95": times[max(0, int(len(times) * 0.95) - 1)],
        "max": times[-1],
    }


def run(requests: int, ids: dict[str, int]) -> list[dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.test import Client, override_settings

    owner = Client(HTTP_HOST="localhost")
    owner.force_login(User.objects.get(username="bench-owner"))
    staff = Client(HTTP_HOST="localhost")
    staff.force_login(User.objects.get(username="bench-admin"))
    pages: list[tuple[str, Callable[[], Any]]] = [
        ("schedules list (all, page 1)", lambda: owner.get("/")),
        ("schedules list (paused tab, page 2)", lambda: owner.get("/?status=paused&page=2")),
        ("schedules list (search)", lambda: owner.get("/?q=briefing%2000")),
        ("schedule detail (paused)", lambda: owner.get(f"/schedules/{ids['paused_schedule']}/")),
        ("run detail (failed)", lambda: owner.get(f"/runs/{ids['failed_run']}/")),
        ("budget", lambda: owner.get("/budget/")),
        ("conversations", lambda: owner.get("/conversations/")),
        ("admin: runs changelist (ours)", lambda: staff.get("/admin/runs/run/")),
        (
            "admin: runs, filtered (ours)",
            lambda: staff.get("/admin/runs/run/?status=failed&provider=anthropic"),
        ),
        ("admin: schedules changelist", lambda: staff.get("/admin/schedules/schedule/")),
        ("admin: ledger changelist", lambda: staff.get("/admin/accounting/ledgerentry/")),
    ]
    results = [measure(label, get, requests) for label, get in pages]
    with override_settings(ROOT_URLCONF=stock_runs_admin()):
        results.append(
            measure(
                "admin: runs changelist (Django defaults)",
                lambda: staff.get("/stock-admin/runs/run/"),
                requests,
            )
        )
    return results


def reuse_database(name: str) -> dict[str, int]:
    """Point Django at an existing, already seeded bench database (after a --keep run)."""
    import os
    from urllib.parse import urlsplit, urlunsplit

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ["DATABASE_URL"] = urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from runs.models import Run

    failed = Run.objects.filter(owner_id=1, status="failed").order_by("-id").values_list("id", flat=True)[0]
    return {"paused_schedule": 10, "failed_run": failed}


def report(requests: int, results: list[dict[str, Any]]) -> None:
    print(f"\n{requests} requests per page, server time in ms (test client, whole Django stack):\n")
    print(f"{'page':44} {'queries':>7} {'whole-table reads':>17} {'p50':>8} {'p95':>8} {'max':>8}")
    for r in results:
        print(
            f"{r['label']:44} {r['queries']:>7} {r['whole_table']:>17} "
            f"{r['p50']:>8.1f} {r['p95']:>8.1f} {r['max']:>8.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--owner-schedules", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--reuse", action="store_true", help="measure a database kept by an earlier --keep run"
    )
    args = parser.parse_args()
    if args.reuse:
        ids = reuse_database("bench_dashboard")
        measure_all(args, ids)
        return
    with bench_database("bench_dashboard", keep=args.keep):
        started = time.perf_counter()
        ids = seed(args.schedules, args.runs, args.owner_schedules)
        print(f"seeded in {time.perf_counter() - started:.0f} s", flush=True)
        measure_all(args, ids)


def measure_all(args: argparse.Namespace, ids: dict[str, int]) -> None:
    report(args.requests, run(args.requests, ids))


if __name__ == "__main__":
    main()
