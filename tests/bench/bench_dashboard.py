"""Owner pages and admin changelists for the heaviest owner, next to a light owner in the same
database, measured in the same run: query counts and server time.

    .venv/bin/python tests/bench/bench_dashboard.py [--runs 1000000] [--schedules 10000]
        [--light-owners 10] [--requests 50] [--keep | --reuse] [--quick]

Seeds (INSERT ... SELECT generate_series) one heavy owner with --schedules schedules and --runs
runs, each with its conversation, occurrence, schedule.run_accounted event and ledger entry, all
in the current month, and --light-owners light owners with 10 schedules and 1,000 runs each,
then the spend rollups the ledger adds up to and the forecast's inputs. The heavy owner's runs were
executed by a few workers, the busiest holding 40 % of them, all older than the last 40 % (the
admin's run list filtered by it is compared with that of a worker of the light owners' runs).
Requests go through the whole Django stack (middleware, sessions, context processors, templates)
with the test client, so "server time" is what a request costs in the process, without the
network. The heavy and the light
owner's requests to a page take turns, so a machine's load meets both alike. Goals (issue: pages
flat): at most 12 queries and p95 at most 100 ms on every page, for the heavy owner as for a light
one, and each heavy page's p95 within 1.5x the light one's.

DATABASE_URL names the server (default: an embedded PostgreSQL started for the run); the script
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
from tests.bench._setup import bench_database, progress, seed_forecast, seed_rollups
from tests.bench.report import figure, parse_args

LIGHT_SCHEDULES = 30  # enough to fill a page of the list, as the heavy owner's does
# Which schedules are paused: a tenth of the heavy owner's, five in six of a light owner's, so that
# the paused tab shows a full page (25 rows) for both and a page is compared with a page of the same
# rows (with a tenth, a light owner's tab showed 3 rows against the heavy owner's 25).
HEAVY_PAUSED, LIGHT_PAUSED = "s.id % 10 = 0", "(s.id - {first}) % 6 <> 0"
LIGHT_RUNS = 1_000
HEAVY = 1  # the heavy owner's user id
# The workers ("host:pid", a name per process) that ran the heavy owner's runs: two processes in the
# month's first 60 %, one of them holding two thirds of those runs (the busiest), then two others
# after a restart; a worker of its own ran the light owners' runs. The busiest worker's newest run is
# older than the 40 % after it: its run list must not read them to find its own.
BUSY_WORKER, LIGHT_WORKER = "bench-host:101", "bench-host:109"


def heavy_workers(runs: int) -> str:
    return (
        f"(CASE WHEN g <= {runs * 6 // 10} THEN (CASE WHEN g % 3 < 2 THEN '{BUSY_WORKER}' "
        "ELSE 'bench-host:102' END) WHEN g % 2 = 0 THEN 'bench-host:201' ELSE 'bench-host:202' END)"
    )


# Run g of an owner (runs first..first+count-1): schedule first_schedule + (g - first) % schedules,
# its time spread evenly over the current month so far; every 7th run fails.
FRAGMENTS = {
    "i": "(g - $first_run)",
    "schedule": "($first_schedule + (g - $first_run) % $schedules)",
    "slot": """(date_trunc('month', now()) + (now() - date_trunc('month', now()) - interval '10 minutes')
        * ((g - $first_run)::float / $runs))""",
    "failed": "g % 7 = 0",
}


def step(label: str, sql: str, params: dict[str, Any], *, quiet: bool = False) -> None:
    """Run `sql` (statements separated by ";" at line ends) with $name filled from trusted
    integers and a JSON literal: server-side binding takes one statement at a time."""
    from django.db import connection

    started = time.perf_counter()
    if not quiet:
        print(f"  {label} …", end="", flush=True)
    with connection.cursor() as cursor:
        filled = Template(Template(sql).safe_substitute(FRAGMENTS)).substitute(params)
        for statement in filled.split(";\n"):
            if statement.strip():
                cursor.execute(statement)
    if not quiet:
        print(f" {time.perf_counter() - started:.1f} s", flush=True)


OWNER_SQL = """
INSERT INTO schedules_schedule (id, owner_id, title, kind, status, consecutive_failures,
                                next_occurrence_at, created_at)
SELECT g, $owner, 'Research briefing ' || lpad((g - $first_schedule)::text, 5, '0'), 'recurring',
       CASE WHEN g % 50 = 7 THEN 'completed' ELSE 'active' END,
       CASE WHEN g % 10 = 0 THEN 2 WHEN g % 3 = 0 THEN 1 ELSE 0 END,
       date_trunc('day', now()) + interval '1 day 6 hours' + (g % 600) * interval '1 minute',
       date_trunc('month', now())
FROM generate_series($first_schedule, $first_schedule + $schedules - 1) g;
INSERT INTO schedules_schedulerevision (id, schedule_id, number, created_at, created_by_id, path, via,
                                        reason, title, prompt, cron, timezone, run_at, agent_id,
                                        limits, max_consecutive_failures)
SELECT g, g, 1, date_trunc('month', now()), NULL, 'schedule.create', 'bench', '',
       'Research briefing ' || lpad((g - $first_schedule)::text, 5, '0'),
       'Research what changed since yesterday and write a five-point briefing.',
       (g % 60) || ' 9 * * *', 'Europe/Riga', NULL, 1, $limits::jsonb, 2
FROM generate_series($first_schedule, $first_schedule + $schedules - 1) g;
UPDATE schedules_schedule SET current_revision_id = id WHERE owner_id = $owner;
INSERT INTO runs_conversation (id, owner_id, title, metadata, created_at, last_activity_at)
SELECT g, $owner, 'Research briefing — run ' || g,
       jsonb_build_object('schedule_id', $schedule, 'occurrence_id', g), $slot, $slot
FROM generate_series($first_run, $first_run + $runs - 1) g;
INSERT INTO runs_run (
    id, owner_id, conversation_id, agent_id, kind, parent_id, prompt, status, limits,
    steps, model_calls, tool_calls, cost, synthesis_dimension, synthesis_step, answer,
    failure_reason, error_class, failure_dimension, transient, provider, provider_code,
    http_status, provider_parameter, failure_message, created_at, started_at,
    finished_at, heartbeat_at, history_omitted, worker)
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
       $slot, $slot, $slot + interval '40 seconds', $slot + interval '40 seconds', false, $worker
FROM generate_series($first_run, $first_run + $runs - 1) g;
INSERT INTO schedules_occurrence (id, schedule_id, scheduled_for, revision_id, outcome, run_id,
                                  created_at, claimed_at, finished_at)
SELECT g, $schedule, $slot, $schedule, CASE WHEN $failed THEN 'failed' ELSE 'completed' END, g,
       $slot, $slot, $slot + interval '40 seconds'
FROM generate_series($first_run, $first_run + $runs - 1) g;
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
FROM generate_series($first_run, $first_run + $runs - 1) g;
INSERT INTO accounting_ledgerentry (id, created_at, owner_id, run_id, schedule_id, provider, model,
                                    input_tokens, output_tokens, cost)
SELECT g, $slot + interval '20 seconds', $owner, g, $schedule, 'anthropic', 'claude-research',
       12000, 1500, 0.05 + (g % 50) / 1000.0
FROM generate_series($first_run, $first_run + $runs - 1) g;
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
WHERE r.owner_id = $owner AND r.id > $first_run + $runs - 2000;
INSERT INTO schedules_pauseevent (
    id, schedule_id, action, reason, actor_id, run_id, failures_at_event, failure_limit, detail,
    created_at)
SELECT s.id, s.id, 'pause', 'failure_limit', NULL, NULL, 2, 2, '', now() - interval '1 hour'
FROM schedules_schedule s WHERE s.owner_id = $owner AND $paused;
UPDATE schedules_schedule s SET status = 'paused', pause_id = id WHERE owner_id = $owner AND $paused;
UPDATE schedules_schedule s SET last_event_id = e.newest
FROM (SELECT schedule_id, max(id) AS newest FROM accounting_accountingevent WHERE owner_id = $owner
      GROUP BY schedule_id) e
WHERE e.schedule_id = s.id;
INSERT INTO accounting_reservation (owner_id, run_id, amount, created_at, released_at)
SELECT $owner, id, 5, now(), NULL FROM runs_run WHERE owner_id = $owner ORDER BY id DESC LIMIT 3
"""

# A conversation the owner has with the assistant: $exchanges messages and answers (completed
# interactive runs outside any schedule, each with its transcript and ledger entry).
CHAT_SQL = """
INSERT INTO runs_conversation (id, owner_id, title, metadata, created_at, last_activity_at, agent_id)
VALUES ($conversation, $owner, 'Talking about the markets', '{}'::jsonb, now() - interval '2 hours',
        now() - interval '1 minute', 1);
INSERT INTO runs_run (
    id, owner_id, conversation_id, agent_id, kind, parent_id, prompt, status, limits,
    steps, model_calls, tool_calls, cost, synthesis_dimension, synthesis_step, answer,
    failure_reason, error_class, failure_dimension, transient, provider, provider_code,
    http_status, provider_parameter, failure_message, created_at, started_at,
    finished_at, heartbeat_at, history_omitted, history_sent)
SELECT g, $owner, $conversation, 1, 'interactive', NULL, 'What moved the markets, part ' || g || '?',
       'completed', $limits::jsonb, 2, 2, 1, 0.02, '', NULL, 'They moved because of rates, part ' || g || '.',
       '', '', '', NULL, '', '', NULL, '', '',
       now() - interval '1 hour' + (g - $first_run) * interval '1 second',
       now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour',
       g - $first_run > 20, least(g - $first_run, 20)
FROM generate_series($first_run, $first_run + $exchanges - 1) g;
INSERT INTO runs_transcriptentry (
    run_id, seq, step, role, content, tool_calls, tool_call_id, tool_name, is_error, created_at)
SELECT r.id, s.seq, (s.seq + 1) / 2,
       CASE WHEN s.seq = 0 THEN 'user' WHEN s.seq = 2 THEN 'tool' ELSE 'assistant' END,
       CASE WHEN s.seq = 0 THEN r.prompt WHEN s.seq = 2 THEN 'three results' WHEN s.seq = 3 THEN r.answer
            ELSE '' END,
       CASE WHEN s.seq = 1 THEN '[{"id": "c1", "name": "web.search", "arguments": "{}"}]'::jsonb
            ELSE '[]'::jsonb END,
       CASE WHEN s.seq = 2 THEN 'c1' ELSE '' END, CASE WHEN s.seq = 2 THEN 'web.search' ELSE '' END, false,
       r.created_at
FROM runs_run r CROSS JOIN generate_series(0, 3) AS s(seq) WHERE r.conversation_id = $conversation;
INSERT INTO accounting_ledgerentry (id, created_at, owner_id, run_id, schedule_id, provider, model,
                                    input_tokens, output_tokens, cost)
SELECT g, now() - interval '1 hour', $owner, g, NULL, 'anthropic', 'claude-research', 2000, 300, 0.02
FROM generate_series($first_run, $first_run + $exchanges - 1) g
"""
# Exchanges in each owner's conversation with the assistant: the light one's fills the page of the
# newest 20 and the page of the 20 before its middle, as the heavy one's does.
HEAVY_CHAT, LIGHT_CHAT = 1_000, 50


def seed(schedules: int, runs: int, light_owners: int) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import connection

    from runs.models import DEFAULT_MAX_OUTPUT_TOKENS
    from tests.factories import limits

    print(
        f"seeding a heavy owner ({schedules} schedules, {runs} runs and ledger entries this month) and "
        f"{light_owners} light owners ({LIGHT_SCHEDULES} schedules, {LIGHT_RUNS} runs each):",
        flush=True,
    )
    limits_json = limits(
        synthesis_reserve_steps=2, synthesis_reserve_model_calls=2, synthesis_reserve_cost="1.00"
    ).model_dump_json()
    params: dict[str, Any] = {
        "users": light_owners + 1,
        "limits": "'" + limits_json.replace("'", "''") + "'",
        "max_output_tokens": DEFAULT_MAX_OUTPUT_TOKENS,
    }
    step(
        "owners, budgets and the agent",
        """
        INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name, email,
                               is_staff, is_active, date_joined)
        SELECT g, '!', false, CASE WHEN g = 1 THEN 'heavy-owner' ELSE 'light-owner-' || g END, '', '', '',
               false, true, now()
        FROM generate_series(1, $users) g;
        INSERT INTO accounting_ownerbudget (owner_id, timezone, daily_ceiling, monthly_ceiling, updated_at)
        SELECT g, 'Europe/Riga', 100000, 1000000, now() FROM generate_series(1, $users) g;
        INSERT INTO runs_agent (id, name, provider, model, base_url, api_key_setting, system_prompt, tools,
                                prices, default_limits, cost_limit, max_output_tokens,
                                is_active, created_at, history_turns, history_tokens)
        VALUES (1, 'researcher', 'anthropic', 'claude-research', '', 'ANTHROPIC_API_KEY', '', '[]',
                '{"input": "3.00", "output": "15.00"}'::jsonb, $limits::jsonb, NULL, $max_output_tokens,
                true, now(), 20, 12000);
        """,
        params,
    )
    started = time.perf_counter()
    print("  the heavy owner's rows …", end="", flush=True)
    step(
        "",
        OWNER_SQL,
        {
            **params,
            "owner": HEAVY,
            "first_schedule": 1,
            "schedules": schedules,
            "first_run": 1,
            "runs": runs,
            "paused": HEAVY_PAUSED,
            "worker": heavy_workers(runs),  # its runs are 1..runs
        },
        quiet=True,
    )
    print(f" {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    print("  the light owners' rows …", end="", flush=True)
    for index in range(light_owners):
        step(
            "",
            OWNER_SQL,
            {
                **params,
                "owner": 2 + index,
                "first_schedule": schedules + 1 + index * LIGHT_SCHEDULES,
                "schedules": LIGHT_SCHEDULES,
                "first_run": runs + 1 + index * LIGHT_RUNS,
                "runs": LIGHT_RUNS,
                "paused": LIGHT_PAUSED.format(first=schedules + 1 + index * LIGHT_SCHEDULES),
                "worker": f"'{LIGHT_WORKER}'",
            },
            quiet=True,
        )
    print(f" {time.perf_counter() - started:.1f} s", flush=True)
    first_chat_run = runs + light_owners * LIGHT_RUNS + 1
    for owner, exchanges, first_run in (
        (HEAVY, HEAVY_CHAT, first_chat_run),
        (HEAVY + 1, LIGHT_CHAT, first_chat_run + HEAVY_CHAT),
    ):
        step(
            f"a conversation of {exchanges} exchanges with the assistant (owner {owner})",
            CHAT_SQL,
            {**params, "owner": owner, "conversation": first_run, "first_run": first_run}
            | {"exchanges": exchanges},
        )
    started = time.perf_counter()
    print("  spend rollups …", end="", flush=True)
    seed_rollups()
    print(f" {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    print("  forecast inputs …", end="", flush=True)
    seed_forecast()
    print(f" {time.perf_counter() - started:.1f} s", flush=True)
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
    return ids_of()


def ids_of() -> dict[str, Any]:
    """For each owner measured: a paused schedule of theirs, their newest failed run, their
    conversation with the assistant and a run in its middle (for its page of older exchanges)."""
    from runs.models import Conversation, Run
    from schedules.models import Schedule

    found = {}
    for label, owner in (("heavy", HEAVY), ("light", HEAVY + 1)):
        chat = Conversation.objects.get(owner_id=owner, agent__isnull=False)
        chat_runs = list(Run.objects.filter(conversation=chat).order_by("id").values_list("id", flat=True))
        found[label] = {
            "owner": owner,
            "paused_schedule": Schedule.objects.filter(owner_id=owner, status="paused").order_by("id")[0].pk,
            "failed_run": Run.objects.filter(owner_id=owner, status="failed").order_by("-id")[0].pk,
            "chat": chat.pk,
            "chat_middle": chat_runs[len(chat_runs) // 2],
        }
    return found


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
    return measure_together(label, [get], requests)[0]


def measure_together(label: str, gets: list[Callable[[], Any]], requests: int) -> list[dict[str, Any]]:
    """Each getter's query count and server times, their requests taking turns (heavy, light, heavy,
    ...): on a machine whose load comes and goes, both owners meet the same load, so their ratio is
    the page's and not the moment's."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    results = []
    for get in gets:
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
        results.append({"label": label, "queries": len(queries), "whole_table": len(whole), "times": []})
    for _ in range(requests):
        for get, result in zip(gets, results, strict=True):
            started = time.perf_counter()
            get()
            result["times"].append((time.perf_counter() - started) * 1000)
    for result in results:
        times = sorted(result.pop("times"))
        result.update(
            p50=statistics.median(times), p95=times[max(0, int(len(times) * 0.95) - 1)], max=times[-1]
        )
    return results


OWNER_PAGES: list[tuple[str, str]] = [
    ("schedules list (all, page 1)", "/"),
    ("schedules list (paused tab)", "/?status=paused"),
    ("schedules list (search)", "/?q=briefing%2000"),
    ("schedule detail (paused)", "/schedules/{paused_schedule}/"),
    ("run detail (failed)", "/runs/{failed_run}/"),
    ("schedule edit form", "/schedules/{paused_schedule}/edit/"),
    ("budget", "/budget/"),
    ("conversations", "/conversations/"),
    ("conversation with the assistant", "/conversations/{chat}/"),
    ("its older exchanges", "/conversations/{chat}/?before={chat_middle}"),
    ("settings", "/settings/"),
    ("new schedule form", "/schedules/new/"),
    ("new conversation form", "/conversations/new/"),
]
ADMIN_PAGES: list[tuple[str, str]] = [
    ("admin: runs changelist", "/admin/runs/run/"),
    ("admin: runs, filtered", "/admin/runs/run/?status__exact=failed&provider=anthropic"),
    ("admin: schedules changelist", "/admin/schedules/schedule/"),
    ("admin: ledger changelist", "/admin/accounting/ledgerentry/"),
    ("admin: accounting events", "/admin/accounting/accountingevent/"),
    ("admin: occurrences", "/admin/schedules/occurrence/"),
    ("admin: conversations", "/admin/runs/conversation/"),
]


WORKER_PAGE = "admin: runs of one worker (filtered)"


def run(requests: int, ids: dict[str, Any]) -> list[dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.test import Client, override_settings

    results = []
    total = len(ids) * (len(OWNER_PAGES) + 1) + len(ADMIN_PAGES) + 1
    clients = {}
    for label, owner_ids in ids.items():
        clients[label] = Client(HTTP_HOST="localhost")
        clients[label].force_login(User.objects.get(pk=owner_ids["owner"]))
    staff = Client(HTTP_HOST="localhost")
    staff.force_login(User.objects.get(username="bench-admin"))
    measured: dict[str, list[dict[str, Any]]] = {label: [] for label in ids}
    for page, url in OWNER_PAGES:
        targets = {label: url.format(**owner_ids) for label, owner_ids in ids.items()}
        gets = [lambda t=targets[label], c=clients[label]: c.get(t) for label in ids]
        for label, found in zip(ids, measure_together(page, gets, requests), strict=True):
            measured[label].append({**found, "owner": label})
        progress("pages measured", sum(len(m) for m in measured.values()), total)
    # The admin's run list of the busiest worker, next to that of a worker of light owners' runs.
    workers = {"heavy": BUSY_WORKER, "light": LIGHT_WORKER}
    for worker in workers.values():
        shown = staff.get(f"/admin/runs/run/?worker={worker}").content.decode()
        rows, theirs = (
            shown.count('<th class="field-id">'),
            shown.count(f'<td class="field-worker">{worker}<'),
        )
        assert rows == theirs > 0, f"the run list is not filtered by {worker}: {theirs} of {rows} rows"
    gets = [lambda w=worker: staff.get(f"/admin/runs/run/?worker={w}") for worker in workers.values()]
    for label, found in zip(workers, measure_together(WORKER_PAGE, gets, requests), strict=True):
        measured[label].append({**found, "owner": label})
    progress("pages measured", sum(len(m) for m in measured.values()), total)
    for rows in measured.values():
        results += rows
    for page, url in ADMIN_PAGES:
        results.append({**measure(page, lambda u=url: staff.get(u), requests), "owner": "admin"})
        progress("pages measured", len(results), total)
    with override_settings(ROOT_URLCONF=stock_runs_admin()):
        stock = measure(
            "admin: runs changelist, Django's defaults", lambda: staff.get("/stock-admin/runs/run/"), requests
        )
        results.append({**stock, "owner": "admin"})
        progress("pages measured", len(results), total)
    return results


def reuse_database(name: str) -> dict[str, Any]:
    """Point Django at an existing, already seeded bench database (after a --keep run)."""
    import os
    from urllib.parse import urlsplit, urlunsplit

    base = os.environ.get("DATABASE_URL", "")
    if not base:
        raise SystemExit("--reuse needs DATABASE_URL: a bench's embedded server is deleted with its data")
    os.environ["DATABASE_URL"] = urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DEBUG", "false")
    import django

    django.setup()
    return ids_of()


QUERY_GOAL, P95_GOAL_MS = 12, 100.0


def report(requests: int, results: list[dict[str, Any]]) -> None:
    print(f"\n{requests} requests per page, server time in ms (test client, whole Django stack):\n")
    print(f"{'owner':6} {'page':42} {'queries':>7} {'whole-table':>11} {'p50':>8} {'p95':>8} {'max':>8}")
    for r in results:
        print(
            f"{r['owner']:6} {r['label']:42} {r['queries']:>7} {r['whole_table']:>11} "
            f"{r['p50']:>8.1f} {r['p95']:>8.1f} {r['max']:>8.1f}"
        )
    heavy = {r["label"]: r for r in results if r["owner"] == "heavy"}
    light = {r["label"]: r for r in results if r["owner"] == "light"}
    print("\nheavy owner against a light one (p95 ratio; goal: flat, at most 1.5x):")
    for label, row in heavy.items():
        print(f"  {label:42} {row['p95'] / max(light[label]['p95'], 0.001):>6.2f}x")
    ours = [r for r in results if "Django's defaults" not in r["label"]]
    missed = [r for r in ours if r["queries"] > QUERY_GOAL or r["p95"] > P95_GOAL_MS]
    print(
        f"\ngoal: at most {QUERY_GOAL} queries and p95 at most {P95_GOAL_MS:.0f} ms on every page: ", end=""
    )
    print("met" if not missed else "missed on " + ", ".join(f"{r['owner']} {r['label']}" for r in missed))
    figures(results)


def figures(results: list[dict[str, Any]]) -> None:
    """The BENCH lines: each page of the heavy owner next to a light owner's (the busiest worker's
    run list next to a light worker's), the admin's changelists, and the most queries a page makes."""
    light = {r["label"]: r for r in results if r["owner"] == "light"}
    for row in (r for r in results if r["owner"] == "heavy"):
        base = light[row["label"]]
        ratio = row["p95"] / max(base["p95"], 0.001)
        worker = row["label"] == WORKER_PAGE
        figure(
            f"{row['label']}: p95, {'the busiest worker' if worker else 'the heaviest owner'}",
            row["p95"],
            "ms",
            baseline="a worker of light owners' runs" if worker else "a light owner's",
            baseline_value=base["p95"],
            ratio=ratio,
            goal=f"<= 1.5x, < {P95_GOAL_MS:.0f} ms",
            met=ratio <= 1.5 and row["p95"] < P95_GOAL_MS,
        )
    admin = [r for r in results if r["owner"] == "admin"]
    stock = next(r for r in admin if "Django's defaults" in r["label"])
    for row in admin:
        if row is stock:
            continue
        runs_list = row["label"] == "admin: runs changelist"
        figure(
            f"{row['label']}: p95",
            row["p95"],
            "ms",
            baseline="Django's default changelist of runs" if runs_list else None,
            baseline_value=stock["p95"] if runs_list else None,
            goal=f"< {P95_GOAL_MS:.0f} ms",
            met=row["p95"] < P95_GOAL_MS,
        )
    ours = [r for r in results if r is not stock]
    most = max(ours, key=lambda r: r["queries"])
    figure(
        f"most queries on a page ({most['label']})",
        most["queries"],
        "",
        goal=f"<= {QUERY_GOAL}",
        met=most["queries"] <= QUERY_GOAL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=10_000, help="the heavy owner's schedules")
    parser.add_argument("--runs", type=int, default=1_000_000, help="the heavy owner's runs this month")
    parser.add_argument("--light-owners", type=int, default=10)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--reuse", action="store_true", help="measure a database kept by an earlier --keep run"
    )
    args = parse_args(parser, quick={"schedules": 300, "runs": 10_000, "light_owners": 2, "requests": 5})
    if args.reuse:
        ids = reuse_database("bench_dashboard")
        measure_all(args, ids)
        return
    with bench_database("bench_dashboard", keep=args.keep):
        started = time.perf_counter()
        ids = seed(args.schedules, args.runs, args.light_owners)
        print(f"seeded in {time.perf_counter() - started:.0f} s", flush=True)
        measure_all(args, ids)


def measure_all(args: argparse.Namespace, ids: dict[str, Any]) -> None:
    report(args.requests, run(args.requests, ids))


if __name__ == "__main__":
    main()
