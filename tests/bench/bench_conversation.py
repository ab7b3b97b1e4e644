"""Talking to the assistant, end to end: 50 messages to sim-assistant answered by a real 2-worker
django-q2 cluster. Prints, p50 and p95:

- the message POST itself (the page never waits on the provider; goal < 100 ms p95);
- POST -> worker starts the run (the queue: bounded by django-q2's ORM broker poll, 0.5 s);
- worker start -> first progress visible (goal: within 1 s p95);
- POST -> first progress visible, and run end -> answer visible, both as the server shows them
  to a poll (this script polls every 20 ms) and as the browser sees them, polling every 1 s
  (the page's interval), from the moment the POST's answer arrived;

next to the baseline of the same messages driven in-process with no queue and no poll, measured
in the same run. Requests go through the whole Django stack with the test client (DEBUG off), so
"server time" excludes the network; the cluster is a real `manage.py qcluster` process.

    .venv/bin/python tests/bench/bench_conversation.py [--messages 50] [--workers 2] [--keep] [--quick]

DATABASE_URL names the server (default: an embedded PostgreSQL started for the run); the script
creates the database bench_conversation and drops it at the end unless --keep.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database, progress, start_cluster, stop_cluster
from tests.bench.report import figure, parse_args

MESSAGES = [
    "every weekday at 7:30 brief me on topic {n}",  # clock.now, schedule.create, answer: 3 steps
    "what time is it?",  # clock.now, answer: 2 steps
    "remind me tomorrow at 9 to call supplier {n}",  # 3 steps
    "hello, what can you do?",  # an answer: 1 step
    "every Monday at 18:00 remind me to review week {n}",  # 3 steps
]
PER_CONVERSATION = 5
SERVER_POLL = 0.02  # this script's poll of the page's tail
PAGE_POLL = 1.0  # the page's own htmx poll: hx-trigger="every 1s"
BROKER_POLL = 0.5  # settings.Q_CLUSTER["poll"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def browser_sees(visible_after: float) -> float:
    """When a page polling every PAGE_POLL seconds from the POST's answer sees what the server
    shows `visible_after` seconds after it: at once if it was already there, else its next poll."""
    return 0.0 if visible_after <= 0 else math.ceil(visible_after / PAGE_POLL) * PAGE_POLL


def seed() -> tuple[Any, Any]:
    from decimal import Decimal

    from django.contrib.auth.models import User

    from accounting import ledger
    from tests.factories import make_assistant

    owner = User.objects.create(username="bench-owner")
    budget = ledger.budget_for(owner.pk)
    budget.timezone = "Europe/Riga"
    budget.daily_ceiling = budget.monthly_ceiling = budget.schedule_cost_ceiling = Decimal("100000")
    budget.save()
    return owner, make_assistant()


def one_message(client: Any, conversation_id: int | None, text: str) -> dict[str, Any]:
    """POST the message, then poll the conversation's tail as htmx does until the run ended."""
    from runs.models import Run

    started = time.time()
    if conversation_id is None:
        response = client.post("/conversations/new/", {"agent": "sim-assistant", "message": text})
    else:
        response = client.post(f"/conversations/{conversation_id}/messages/", {"message": text})
    posted = time.time()
    assert response.status_code == 302, response.content[:500]
    run = Run.objects.filter(owner__username="bench-owner").order_by("-pk").first()
    assert run is not None and run.prompt == text
    first_visible = ended_visible = None
    while ended_visible is None:
        tail = client.get(f"/conversations/{run.conversation_id}/", headers={"HX-Request": "true"})
        now = time.time()
        if first_visible is None and 'class="step' in tail.content.decode():
            first_visible = now
        if tail.status_code == 286:
            ended_visible = now
            first_visible = first_visible or now
            break
        if now - started > 60:
            raise RuntimeError(f"run {run.pk} did not end within 60 s")
        time.sleep(SERVER_POLL)
    run.refresh_from_db()
    first_step = (
        run.transcript.filter(role="assistant").order_by("seq").values_list("created_at", flat=True)[0]
    )
    assert run.status == "completed", (run.status, run.failure_message)
    assert run.started_at is not None and run.finished_at is not None
    return {
        "conversation": run.conversation_id,
        "post": posted - started,
        "queue": run.started_at.timestamp() - posted,
        "start_to_first_step": first_step.timestamp() - run.started_at.timestamp(),
        "start_to_first_visible": first_visible - run.started_at.timestamp(),
        "post_to_first_visible": first_visible - posted,
        "end_to_answer_visible": ended_visible - run.finished_at.timestamp(),
        "run": run.finished_at.timestamp() - run.started_at.timestamp(),
        "steps": run.steps,
    }


def baseline(owner: Any, agent: Any, count: int) -> dict[str, list[float]]:
    """The same messages, queued by the same service and driven in this process at once: no
    queue, no worker hand-off, no poll."""
    from runs import conversations

    firsts, totals = [], []
    for index in range(count):
        text = MESSAGES[index % len(MESSAGES)].format(n=f"b{index}")
        run = conversations.start_conversation(owner.pk, agent, text, enqueue=lambda ids: None)
        started = time.time()
        done = conversations.execute_message(run.pk, sleep=lambda seconds: None)
        assert done is not None and done.status == "completed"
        first = (
            done.transcript.filter(role="assistant").order_by("seq").values_list("created_at", flat=True)[0]
        )
        firsts.append(first.timestamp() - started)
        totals.append(time.time() - started)
    return {"first_step": firsts, "total": totals}


def line(label: str, values: list[float], *, unit: str = "ms", goal: str = "") -> None:
    scale = 1000 if unit == "ms" else 1
    p50, p95 = percentile(values, 0.5) * scale, percentile(values, 0.95) * scale
    top = max(values) * scale
    extra = f"   ({goal})" if goal else ""
    print(f"  {label:<46} p50 {p50:8.1f} {unit}   p95 {p95:8.1f} {unit}   max {top:8.1f} {unit}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true")
    args = parse_args(parser, quick={"messages": 5})

    with bench_database("bench_conversation", keep=args.keep) as url:
        from django.conf import settings
        from django.db import connections
        from django.test import Client
        from django_q.models import Schedule as QueueSchedule

        assert not settings.DEBUG
        owner, agent = seed()
        QueueSchedule.objects.all().delete()  # no tick, reaper or notify firing meanwhile
        connections.close_all()
        client = Client(HTTP_HOST="localhost")
        client.force_login(owner)
        cluster = start_cluster(url, Q_WORKERS=str(args.workers))
        try:
            one_message(client, None, "hello")  # the cluster is up and warm
            results: list[dict[str, Any]] = []
            conversation_id = None
            for index in range(args.messages):
                if index % PER_CONVERSATION == 0:
                    conversation_id = None
                text = MESSAGES[index % len(MESSAGES)].format(n=index)
                result = one_message(client, conversation_id, text)
                conversation_id = result["conversation"]
                results.append(result)
                progress("messages answered", index + 1, args.messages)
        finally:
            stop_cluster(cluster)
        inline = baseline(owner, agent, args.messages)

        def column(key: str) -> list[float]:
            return [r[key] for r in results]

        print()
        print(
            f"{len(results)} messages to sim-assistant ({sum(column('steps')):.0f} steps), "
            f"a {args.workers}-worker cluster, {PER_CONVERSATION} messages per conversation; DEBUG off"
        )
        line("message POST (server time)", column("post"), goal="goal < 100 ms p95")
        line("POST -> worker starts the run", column("queue"), goal=f"broker poll {BROKER_POLL} s")
        line("worker start -> first step committed", column("start_to_first_step"))
        line(
            "worker start -> first progress visible", column("start_to_first_visible"), goal="goal < 1 s p95"
        )
        line("POST -> first progress visible (20 ms poll)", column("post_to_first_visible"))
        # On the POST's time axis (0 = its answer): the worker starts at `queue`, progress is
        # visible at `post_to_first_visible`, the run ends at queue + run, its answer is visible
        # after end_to_answer_visible more; the page sees each at its next 1 s poll.
        seen_first = [browser_sees(r["post_to_first_visible"]) for r in results]
        ended = [r["queue"] + r["run"] for r in results]
        seen_answer = [
            browser_sees(e + r["end_to_answer_visible"]) for e, r in zip(ended, results, strict=True)
        ]
        line("POST -> first progress seen (page polls 1 s)", seen_first, goal="page poll interval 1 s")
        line(
            "worker start -> first progress seen (1 s)",
            [f - r["queue"] for f, r in zip(seen_first, results, strict=True)],
        )
        line("run end -> answer visible (20 ms poll)", column("end_to_answer_visible"))
        line(
            "run end -> answer seen (page polls 1 s)",
            [a - e for a, e in zip(seen_answer, ended, strict=True)],
        )
        line("run, worker start -> end", column("run"))
        print("baseline: the same messages driven in-process, no queue and no poll")
        line("in-process start -> first step committed", inline["first_step"])
        line("in-process whole message", inline["total"])
        cluster_total = ended
        print(
            f"  ratio, POST -> run end on the cluster / in-process whole message (p50): "
            f"{statistics.median(cluster_total) / statistics.median(inline['total']):.1f}x"
        )
        inline_total = statistics.median(inline["total"])
        figure(
            "a message's POST, p95",
            percentile(column("post"), 0.95) * 1000,
            "ms",
            goal="< 100 ms",
            met=percentile(column("post"), 0.95) < 0.1,
        )
        figure("POST -> a worker starts the run, p50", percentile(column("queue"), 0.5) * 1000, "ms")
        start_to_visible = percentile(column("start_to_first_visible"), 0.95)
        figure(
            "worker start -> first progress visible, p95",
            start_to_visible * 1000,
            "ms",
            goal="< 1 s",
            met=start_to_visible < 1,
        )
        figure(
            "run end -> answer visible, p95", percentile(column("end_to_answer_visible"), 0.95) * 1000, "ms"
        )
        figure(
            "POST -> run end on the cluster, p50",
            statistics.median(cluster_total) * 1000,
            "ms",
            baseline="the whole message in-process, no queue and no poll (p50)",
            baseline_value=inline_total * 1000,
        )
        print(
            "bounds: a message waits for the broker's next poll of its queue table (0.5 s) before a "
            "worker starts it, and the page sees what the server shows at its next poll (every 1 s); "
            "the run itself, a few provider round trips to the in-process simulator, is the rest."
        )


if __name__ == "__main__":
    main()
