"""The run loop's own overhead per step, next to bare provider round-trips and a single-client
`pgbench -N` transaction measured in the same run.

    .venv/bin/python tests/bench/bench_runtime.py [--runs 200] [--profile] [--quick]

Runs N runs of `sim-research` (three steps each: two tool turns, then the answer) in-process
against the simulated provider on PostgreSQL. Next to each run, the same conversation goes as bare
round-trips through the adapter (`adapter.complete` on the same in-process simulator transport,
no database, no loop). Prints the loop's time per step (database writes and tools included) and
steps per second, the bare round-trip per call, the difference (the loop's own overhead per step),
the SQL statements per step, and where a step's time goes. Then runs that start with 10, 100 and
1,000 transcript entries already in their context: their start and their overhead per step.

The goal is a ratio, since machines differ: the overhead per step at most 3x the latency of one
single-client `pgbench -N` transaction (three updates, an insert and a select) on the same server,
measured in the same run; its BENCH line says whether it is met. The machine's speed drifts over a
minute (a shared host's neighbours), so the runs go in --blocks blocks, each just after its own
`pgbench -N`: each block has its ratio, and the figure is the block with the median ratio.

Then, as an experiment and not a mode of the product, the same blocks again with the loop's own
sessions committing without waiting for the disk (synchronous_commit off; pgbench's baseline still
waits): what the loop would cost if a step's money did not have to be safe on disk before the next
call. Its figure says so and has no goal.

It works in its own database (`bench_runtime` on the server of DATABASE_URL, created and
migrated first, dropped at the end unless --keep) and never touches any other data.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench._setup import bench_database, pgbench, pgbench_init
from tests.bench.report import figure, parse_args

GOAL_RATIO = 3.0  # loop overhead per step / single-client pgbench -N latency
RESUMED = (10, 100, 1000)
PROMPT = "Research today's technology news and write a briefing."
CLOCK = "2026-09-01T09:00:00+03:00 (Europe/Riga, Tuesday)"
# (label, module path, attribute): the parts of a run whose time is reported separately.
PHASES = [
    ("start (limits, tools, history)", "runs.runtime._Loop", "__post_init__"),
    ("provider request (streamed)", "runs.runtime._Loop", "request"),
    ("  of which opening the call", "runs.runtime._Loop", "open"),
    ("usage, counters, transcript", "runs.runtime._Loop", "record_response"),
    ("tool calls", "runs.runtime._Loop", "run_tools"),
    ("  of which the tools' own work", "runs.runtime", "invoke"),
    ("finish (state, reservation)", "runs.services", "finish_run"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="timed runs of sim-research (default 200)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    parser.add_argument(
        "--database", default="bench_runtime", help="its own database (default bench_runtime)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the timed runs")
    parser.add_argument(
        "--pgbench-seconds", type=int, default=2, help="the baseline's length before each block (default 2)"
    )
    parser.add_argument(
        "--blocks", type=int, default=5, help="blocks of runs, each after its own baseline (default 5)"
    )
    args = parse_args(parser, quick={"runs": 20, "warmup": 3, "pgbench_seconds": 1, "blocks": 2})
    if args.runs < 1 or not 1 <= args.blocks <= args.runs:
        parser.error("--runs must be at least 1, and --blocks from 1 to --runs")
    os.environ["DEBUG"] = "false"  # as in production: no query log kept in memory
    with bench_database(args.database, keep=args.keep) as url:
        pgbench_init(url)
        return bench(args, lambda: pgbench(url, 1, args.pgbench_seconds, "-N")["latency_ms"])


def commit_asynchronously() -> None:
    """This process's sessions from now on: synchronous_commit off (the experiment). The pool is
    closed, so that every connection is a new one."""
    from django.db import connection

    connection.close()
    connection.close_pool()
    options = connection.settings_dict["OPTIONS"]
    options["options"] = f"{options.get('options', '')} -c synchronous_commit=off".strip()
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        (setting,) = cursor.fetchone()
    assert setting == "off", setting
    print("\nan experiment: the loop's commits do not wait for the disk (synchronous_commit off)", flush=True)


class Timing(NamedTuple):
    """Timed blocks of runs: the totals, and each block's (overhead per step, pgbench -N) in ms."""

    loop_seconds: float
    bare_seconds: float
    cpu_seconds: float  # the loop thread's CPU time in its runs
    steps: int
    bare_calls: int
    blocks: list[tuple[float, float]]

    def median_block(self) -> tuple[float, float]:
        """The block with the median ratio (the lower middle of an even number of blocks)."""
        return self.ordered()[(len(self.blocks) - 1) // 2]

    def ordered(self) -> list[tuple[float, float]]:
        return sorted(self.blocks, key=lambda b: b[0] / b[1])


def timed(spent: Counter[str], label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - begin

    return wrapper


def bench(args: argparse.Namespace, baseline: Callable[[], float]) -> int:
    import importlib

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.limits import RunLimits
    from runs.models import Agent, Run
    from runs.providers import adapter_for, client_for
    from runs.providers.base import Message, ModelRequest
    from runs.runtime import execute_run
    from runs.services import claim_run
    from runs.tools import tools_for
    from tests.factories import start_interactive_run

    owner = User.objects.create_user("bench-owner")
    limits = RunLimits(
        max_steps=10,
        max_model_calls=10,
        max_tool_calls=6,
        max_cost="5.00",
        synthesis_reserve_steps=0,
        synthesis_reserve_model_calls=0,
        synthesis_reserve_tool_calls=0,
        synthesis_reserve_cost="0",
    )
    agent = Agent.objects.create(
        name="bench-sim-research",
        provider=Agent.Provider.SIMULATED,
        model="sim-research",
        tools=["clock.now"],
        prices={"input": "3.00", "output": "15.00"},
        default_limits=limits.to_json(),
    )
    client = client_for(agent)  # the in-process simulator transport, shared by both sides
    adapter = adapter_for(agent, client)
    specs = tuple(tool.spec() for tool in tools_for(agent))

    def claimed_run() -> Run:
        run = start_interactive_run(owner.pk, agent, PROMPT, limits=limits)
        claim_run(run)
        return run

    def loop_run() -> tuple[float, float, Run]:
        """A run's wall time and this thread's CPU time in it (the loop runs on this thread: the
        rest of the wall time it spent waiting, on PostgreSQL)."""
        run = claimed_run()
        begin, cpu = time.perf_counter(), time.thread_time()
        finished = execute_run(run, client=client)
        elapsed, cpu = time.perf_counter() - begin, time.thread_time() - cpu
        assert finished.status == Run.Status.COMPLETED, finished.failure_message
        return elapsed, cpu, finished

    def bare_conversation(calls_wanted: int) -> tuple[float, int]:
        """The same conversation through the adapter alone (in-process: all of it CPU)."""
        messages = [Message(role="user", content=PROMPT)]
        calls = 0
        begin = time.perf_counter()
        while calls < calls_wanted:
            request = ModelRequest(model=agent.model, system="", messages=tuple(messages), tools=specs)
            response = adapter.complete(request)
            calls += 1
            if not response.tool_calls:
                break
            messages.append(Message(role="assistant", content=response.text, tool_calls=response.tool_calls))
            messages += [
                Message(role="tool", content=CLOCK, tool_call_id=call.id, tool_name=call.name)
                for call in response.tool_calls
            ]
        return time.perf_counter() - begin, calls

    for _ in range(args.warmup):
        loop_run()
        bare_conversation(10)
    sample = claimed_run()
    with CaptureQueriesContext(connection) as queries:
        sample = execute_run(sample, client=client)
    statements = [query["sql"] for query in queries.captured_queries]
    writes = sum(1 for sql in statements if sql.startswith(("INSERT", "UPDATE", "DELETE")))

    spent: Counter[str] = Counter()
    for label, owner_path, attribute in PHASES:
        module_path, _, class_name = owner_path.partition("._")
        owner_object: Any = importlib.import_module(module_path)
        if class_name:
            owner_object = getattr(owner_object, "_" + class_name)
        setattr(owner_object, attribute, timed(spent, label, getattr(owner_object, attribute)))

    def timed_blocks(profiler: cProfile.Profile | None = None) -> Timing:
        """args.runs runs in args.blocks blocks, each just after its own pgbench -N, each run next
        to its bare round trips."""
        loop_seconds = bare_seconds = cpu_seconds = 0.0
        steps = bare_calls = done = 0
        blocks = []
        print(
            f"timing {args.runs} runs of sim-research, each next to its bare round-trips, in "
            f"{args.blocks} blocks, each after {args.pgbench_seconds} s of pgbench -N (one client) …",
            flush=True,
        )
        for block in range(1, args.blocks + 1):
            pgbench_ms = baseline()
            block_loop = block_bare = 0.0
            block_steps = block_calls = 0
            size = args.runs * block // args.blocks - done
            for _ in range(size):
                if profiler:
                    profiler.enable()
                elapsed, cpu, finished = loop_run()
                if profiler:
                    profiler.disable()
                cpu_seconds += cpu
                block_loop += elapsed
                block_steps += finished.steps
                elapsed, calls = bare_conversation(finished.steps)
                block_bare += elapsed
                block_calls += calls
            done += size
            loop_seconds, bare_seconds = loop_seconds + block_loop, bare_seconds + block_bare
            steps, bare_calls = steps + block_steps, bare_calls + block_calls
            overhead = 1000 * (block_loop / block_steps - block_bare / block_calls)
            blocks.append((overhead, pgbench_ms))
            print(
                f"  block {block}/{args.blocks}: {done:>5}/{args.runs} runs; pgbench -N {pgbench_ms:.3f} ms, "
                f"loop {1000 * block_loop / block_steps:.3f} ms/step, "
                f"bare {1000 * block_bare / block_calls:.3f} ms/call, "
                f"overhead {overhead:.3f} ms = {overhead / pgbench_ms:.2f}x",
                flush=True,
            )
        return Timing(loop_seconds, bare_seconds, cpu_seconds, steps, bare_calls, blocks)

    profiler = cProfile.Profile() if args.profile else None
    timing = timed_blocks(profiler)
    loop_seconds, bare_seconds, cpu_seconds, steps, bare_calls, blocks = timing
    loop_ms = 1000 * loop_seconds / steps
    bare_ms = 1000 * bare_seconds / bare_calls
    ordered = timing.ordered()
    overhead_ms, pgbench_ms = timing.median_block()
    tools_ms = 1000 * spent["  of which the tools' own work"] / steps
    # The overhead in two parts: waiting (on PostgreSQL: the loop's thread was not running) and
    # Python (its CPU time beyond the bare round trip's).
    waiting_ms = 1000 * (loop_seconds - cpu_seconds) / steps
    python_ms = loop_ms - waiting_ms - bare_ms
    rows = [
        ("runs", f"{args.runs} of sim-research, {steps / args.runs:.0f} steps each"),
        (
            "loop per step",
            f"{loop_ms:.3f} ms  ({steps / loop_seconds:.1f} steps/s; database and tools included)",
        ),
        (
            "bare round-trip",
            f"{bare_ms:.3f} ms  ({bare_calls / bare_seconds:.1f} calls/s; {bare_calls} calls)",
        ),
        ("pgbench -N, one client", f"{pgbench_ms:.3f} ms per transaction (the baseline, median block)"),
        (
            "loop overhead per step",
            f"{overhead_ms:.3f} ms = {overhead_ms / pgbench_ms:.2f}x pgbench -N (goal: {GOAL_RATIO:.0f}x; "
            f"median of {len(blocks)} blocks: {', '.join(f'{o / b:.2f}x' for o, b in ordered)})",
        ),
        ("  without the tools' work", f"{overhead_ms - tools_ms:.3f} ms"),
        (
            "  of which waiting",
            f"{waiting_ms:.3f} ms = {waiting_ms / pgbench_ms:.2f}x pgbench -N (on PostgreSQL; all blocks)",
        ),
        ("  of which Python", f"{python_ms:.3f} ms (all blocks)"),
        ("ratio loop / bare", f"{loop_ms / bare_ms:.1f}"),
        (
            "SQL per step",
            f"{len(statements) / sample.steps:.1f} statements ({writes / sample.steps:.1f} writes)",
        ),
    ]
    print()
    for label, value in rows:
        print(f"{label:<26} {value}")
    print("\nwhere a step's time goes (ms per step)")
    accounted = 0.0
    for label, _, _ in PHASES:
        share = 1000 * spent[label] / steps
        accounted += 0 if label.startswith(" ") else share
        print(f"  {label:<32} {share:7.3f}")
    print(f"  {'the rest (heartbeat, loop)':<32} {loop_ms - accounted:7.3f}")
    if profiler:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).sort_stats(os.environ.get("BENCH_SORT", "cumulative"))
        stats.print_stats(os.environ.get("BENCH_FILTER", ""), int(os.environ.get("BENCH_LINES", "40")))
        print(out.getvalue())
    print("\nruns resumed with a long transcript (start, and overhead of their one step; median of 5)")
    resumed = {}
    for entries in RESUMED:
        samples = [resumed_run(owner, agent, client_for(agent), entries, specs) for _ in range(5)]
        start_ms = statistics.median(start for start, _ in samples)
        step_ms = statistics.median(step for _, step in samples)
        resumed[entries] = start_ms
        print(f"  {entries:>5} entries: start {start_ms:7.3f} ms   overhead per step {step_ms:7.3f} ms")
    within = overhead_ms <= GOAL_RATIO * pgbench_ms
    print("\nwithin the goal" if within else "\nabove the goal")

    commit_asynchronously()
    experiment = timed_blocks()
    client.close()
    unsafe_ms, unsafe_pgbench_ms = experiment.median_block()
    print(
        f"loop overhead per step, its commits not waiting for the disk: {unsafe_ms:.3f} ms = "
        f"{unsafe_ms / unsafe_pgbench_ms:.2f}x pgbench -N (median of {len(experiment.blocks)} blocks: "
        f"{', '.join(f'{o / b:.2f}x' for o, b in experiment.ordered())})"
    )
    figure(
        "the loop's overhead per step",
        overhead_ms,
        "ms",
        baseline="single-client pgbench -N per transaction",
        baseline_value=pgbench_ms,
        goal=f"<= {GOAL_RATIO:g}x",
        met=within,
    )
    figure(
        "the loop's wait on PostgreSQL per step",
        waiting_ms,
        "ms",
        baseline="single-client pgbench -N per transaction",
        baseline_value=pgbench_ms,
    )
    figure(
        "the loop's Python per step, beyond the bare round trip",
        python_ms,
        "ms",
        baseline="single-client pgbench -N per transaction",
        baseline_value=pgbench_ms,
    )
    figure(
        "the loop's overhead per step, were its commits not to wait for the disk (an experiment)",
        unsafe_ms,
        "ms",
        baseline="single-client pgbench -N per transaction",
        baseline_value=unsafe_pgbench_ms,
    )
    figure("SQL statements per step", len(statements) / sample.steps, "")
    figure(
        f"a run resumed with {RESUMED[-1]:,} transcript entries starts in",
        resumed[RESUMED[-1]],
        "ms",
        baseline=f"with {RESUMED[0]:,}",
        baseline_value=resumed[RESUMED[0]],
    )
    return 0


def resumed_run(owner: Any, agent: Any, client: Any, entries: int, specs: Any) -> tuple[float, float]:
    """A run whose context already holds `entries` transcript entries (earlier tool turns); its
    start (reading them back) and the overhead of its next step, over the bare round trip of a
    request of the same size."""
    import uuid

    from runs.limits import RunLimits
    from runs.models import Conversation, Run, TranscriptEntry
    from runs.providers import adapter_for
    from runs.providers.base import Message, ModelRequest, ToolCall
    from runs.runtime import _Loop, execute_run

    pairs = entries // 2
    limits = RunLimits(
        max_steps=pairs + 10,
        max_model_calls=pairs + 10,
        max_tool_calls=pairs + 10,
        max_cost="100.00",
        synthesis_reserve_steps=0,
        synthesis_reserve_model_calls=0,
        synthesis_reserve_tool_calls=0,
        synthesis_reserve_cost="0",
    )
    conversation = Conversation.objects.create(owner=owner, title="resumed")
    run = Run.objects.create(
        owner=owner,
        conversation=conversation,
        agent=agent,
        prompt=PROMPT,
        limits=limits.to_json(),
        status=Run.Status.RUNNING,
        attempt=uuid.uuid4(),
        steps=pairs,
        model_calls=pairs,
        tool_calls=pairs,
    )
    rows = [TranscriptEntry(run=run, seq=0, role="user", content=PROMPT)]
    history = [Message(role="user", content=PROMPT)]
    for index in range(pairs):
        call = {"id": f"call_{index}", "name": "clock_now", "arguments": "{}"}
        rows.append(
            TranscriptEntry(run=run, seq=2 * index + 1, step=index + 1, role="assistant", tool_calls=[call])
        )
        rows.append(
            TranscriptEntry(
                run=run,
                seq=2 * index + 2,
                step=index + 1,
                role="tool",
                content=CLOCK,
                tool_call_id=call["id"],
                tool_name="clock_now",
            )
        )
        history.append(Message(role="assistant", tool_calls=(ToolCall(call["id"], "clock_now", {}, "{}"),)))
        history.append(Message(role="tool", content=CLOCK, tool_call_id=call["id"], tool_name="clock_now"))
    TranscriptEntry.objects.bulk_create(rows)
    begin = time.perf_counter()
    _Loop(run, client, client, time.sleep)
    start_ms = 1000 * (time.perf_counter() - begin)
    begin = time.perf_counter()
    finished = execute_run(run, client=client)
    total_ms = 1000 * (time.perf_counter() - begin)
    assert finished.status == Run.Status.COMPLETED, finished.failure_message
    adapter = adapter_for(agent, client)
    request = ModelRequest(model=agent.model, system="", messages=tuple(history), tools=specs)
    bare_ms = 1000 * min(_timed_call(adapter.complete, request) for _ in range(3))
    # execute_run starts its own loop (reading the transcript back) and makes one step.
    return start_ms, total_ms - start_ms - bare_ms


def _timed_call(function: Any, *args: Any) -> float:
    begin = time.perf_counter()
    function(*args)
    return time.perf_counter() - begin


if __name__ == "__main__":
    sys.exit(main())
