"""Many runs in flight in one worker (docs/decisions/0005-runs-in-flight.md): on a real django-q2
cluster, each guarantee of the run loop with dozens to a hundred runs waiting on the provider at once;
and in-process, the fair claim order and the provider gate shared between threads."""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.db import connection
from django.utils import timezone

from accounting import ledger
from accounting.models import AccountingEvent, LedgerEntry
from runs import inflight
from runs.models import Run
from runs.providers import GATE_WAITED, call_with_retries
from runs.providers.base import Message, ModelRequest, ProviderError
from runs.providers.openai import OpenAIAdapter
from runs.services import cancel_run, claim_run
from schedules import execution
from schedules.models import Occurrence, Schedule
from schedules.tasks import enqueue_occurrences
from tests.factories import make_agent, make_schedule, make_user, start_interactive_run
from tests.scheduler.conftest import read_log, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def roomy(owner, settings):
    """An owner with room for a hundred schedules and their spend."""
    settings.MAX_ACTIVE_SCHEDULES = 1000
    budget = ledger.budget_for(owner.pk)
    budget.daily_ceiling = budget.monthly_ceiling = budget.schedule_cost_ceiling = Decimal("100000")
    budget.save()
    return owner


def _burst(owner, count: int, *, model: str, prompt: str, **agent: object) -> list[Schedule]:
    """`count` one-time schedules due now, materialized and enqueued like the tick does."""
    agent = make_agent(model=model, **agent)
    now = timezone.now()
    run_at = now + timedelta(seconds=1)
    schedules = [
        make_schedule(owner, agent, title=f"Briefing {i}", prompt=prompt, run_at=run_at, now=now)
        for i in range(count)
    ]
    report = execution.materialize_due(enqueue=enqueue_occurrences, now=run_at + timedelta(seconds=1))
    assert len(report.enqueued) == count
    return schedules


def _cluster_connections() -> int:
    """Connections to the test database other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def _running(count: int):
    def all_running() -> bool:
        """every run in flight at once"""
        return Run.objects.filter(status="running").count() == count

    return all_running


def test_one_worker_drives_sixty_runs_at_once_on_a_few_connections(roomy, spawn):
    _burst(roomy, 60, model="sim-slow", prompt="Wait on the provider: delay=4")
    cluster = spawn("qcluster", env={"Q_WORKERS": "1"})

    wait_for(_running(60), timeout=30, interval=0.1)
    # Sixty runs wait on the provider together on a few connections, not one each: the worker's
    # pool (DATABASE_POOL_SIZE, 4) and its heartbeat, watch and waker connections, and the
    # cluster's sentinel, pusher and monitor processes (a pool each, at most two in use).
    assert _cluster_connections() <= 4 + 3 + 3 * 2, read_log(cluster)

    def all_done() -> bool:
        """the sixty runs to end"""
        return Run.objects.filter(status__in=Run.TERMINAL).count() == 60

    wait_for(all_done, timeout=60)
    runs = list(Run.objects.all())
    assert {run.status for run in runs} == {"completed"}, read_log(cluster)
    assert len({run.worker for run in runs}) == 1  # one worker process
    started = sorted(run.started_at for run in runs)
    assert (started[-1] - started[0]).total_seconds() < 4  # all in flight before the first answered
    for run in runs:  # one claim, one call, one charge each
        assert run.model_calls == 1 and LedgerEntry.objects.filter(run_id=run.pk).count() == 1
        assert LedgerEntry.objects.get(run_id=run.pk).cost == run.cost
    assert set(Occurrence.objects.values_list("outcome", flat=True)) == {"completed"}
    assert ledger.summarize(roomy.pk).open_total == Decimal("0")


def test_kill_9_with_a_hundred_runs_in_flight_fails_each_worker_lost_once(roomy, spawn, settings):
    schedules = _burst(roomy, 100, model="sim-slow", prompt="Take your time: delay=60")
    cluster = spawn(
        "qcluster", env={"Q_WORKERS": "1", "RUN_HEARTBEAT_SECONDS": "1", "RUN_LEASE_SECONDS": "3"}
    )

    def all_alive() -> bool:
        """a hundred runs in flight, each heartbeating"""
        fresh = timezone.now() - timedelta(seconds=2)
        return Run.objects.filter(status="running", heartbeat_at__gt=fresh).count() == 100

    wait_for(all_alive, timeout=60, interval=0.2)
    assert ledger.summarize(roomy.pk).open_total > 0
    os.killpg(cluster.pid, signal.SIGKILL)
    cluster.wait(timeout=10)

    settings.RUN_LEASE_SECONDS = 3
    time.sleep(3.5)
    assert sorted(execution.reap()) == sorted(Run.objects.values_list("pk", flat=True))
    assert execution.reap() == []  # idempotent

    assert set(Run.objects.values_list("status", "failure_reason")) == {("failed", "worker_lost")}
    assert ledger.summarize(roomy.pk).open_total == Decimal("0")  # every reservation released
    # Each call was on the wire when the worker died: the provider may have billed it, so each is
    # charged its bound, once (docs/decisions/0006-streaming.md), and the run's event carries it.
    for run in Run.objects.all():
        (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
        assert entry.estimated and entry.cost == Decimal(entry.prices["bound"]["worst"]) == run.cost
        assert 0 < run.cost <= run.run_limits.max_cost and run.open_call is None
        event = AccountingEvent.objects.get(run_id=run.pk)
        assert Decimal(event.payload["usage"]["cost"]) == run.cost
    assert AccountingEvent.objects.count() == 100
    for schedule in schedules:
        schedule.refresh_from_db()
        assert schedule.consecutive_failures == 1


def test_stop_acts_before_the_next_paid_call_of_every_run_in_flight(roomy, spawn):
    _burst(roomy, 30, model="sim-tool-loop", prompt="Loop, slowly: delay=1")
    cluster = spawn("qcluster", env={"Q_WORKERS": "1"})

    def all_calling() -> bool:
        """thirty runs in flight, each past its first paid call"""
        return Run.objects.filter(status="running", model_calls__gte=1).count() == 30

    wait_for(all_calling, timeout=30, interval=0.1)
    calls_at_stop = {}
    for run in Run.objects.filter(status="running"):
        if cancel_run(run):
            run.refresh_from_db()
            calls_at_stop[run.pk] = run.model_calls
        else:  # on a loaded machine a run may reach its limits before Stop reaches it
            run.refresh_from_db()
            assert run.status in ("completed", "failed"), run.status
    assert len(calls_at_stop) >= 20  # Stop reached most of them mid-loop

    def all_stopped() -> bool:
        """the thirty loops to notice"""
        return not Run.objects.filter(status="running").exists()

    wait_for(all_stopped, timeout=30)
    time.sleep(2)  # a call in flight at Stop answers within its delay; nothing after it
    for run in Run.objects.filter(pk__in=calls_at_stop):
        assert run.status == "cancelled", read_log(cluster)
        # At most the one request already on the wire is paid for; none is sent after Stop.
        assert run.model_calls <= calls_at_stop[run.pk] + 1
        assert LedgerEntry.objects.filter(run_id=run.pk).count() == run.model_calls


def test_the_run_deadline_holds_for_every_run_in_flight(roomy, spawn):
    _burst(roomy, 30, model="sim-tool-loop", prompt="Loop, slowly: delay=3")
    cluster = spawn("qcluster", env={"Q_WORKERS": "1", "RUN_MAX_SECONDS": "10"})

    def all_done() -> bool:
        """the thirty runs to reach their deadline"""
        return Run.objects.filter(status__in=Run.TERMINAL).count() == 30

    wait_for(all_done, timeout=40)
    for run in Run.objects.all():
        assert (run.status, run.failure_reason) == ("failed", "timeout"), read_log(cluster)
        assert (run.finished_at - run.started_at).total_seconds() < 10 + 3 + 1  # one call past it at most
        assert LedgerEntry.objects.filter(run_id=run.pk).count() == run.model_calls


def test_reserves_and_bounded_calls_hold_for_every_run_in_flight(roomy, spawn):
    """Forty runs of a model that writes at length at a dear price (about USD 0.60 a call), each
    under USD 1.50 with a USD 0.50 synthesis reserve, all waiting on the provider together."""
    _burst(roomy, 40, model="sim-expensive", prompt="Research, slowly: delay=1", cost_limit="1.50")
    cluster = spawn("qcluster", env={"Q_WORKERS": "1"})

    def all_done() -> bool:
        """the forty runs to end"""
        return Run.objects.filter(status__in=Run.TERMINAL).count() == 40

    wait_for(all_done, timeout=60)
    for run in Run.objects.all():
        limits = run.run_limits
        assert run.cost <= limits.max_cost, read_log(cluster)  # never crossed, whatever the order
        assert sum(e.cost for e in LedgerEntry.objects.filter(run_id=run.pk)) == run.cost
        assert (run.status, run.synthesis_dimension) == ("completed", "cost"), read_log(cluster)
    assert ledger.summarize(roomy.pk).open_total == Decimal("0")


def test_failure_counts_stay_right_when_runs_end_out_of_order(roomy, spawn):
    """Failing and succeeding runs of twenty schedules end interleaved, the slow ones last."""
    failing = _burst(roomy, 10, model="sim-bad-param", prompt="Refused: delay=2")
    slow = [
        make_schedule(
            roomy,
            make_agent(model="sim-slow"),
            title=f"Slow {i}",
            prompt=f"Answer: delay={1 + i % 3}",
            run_at=timezone.now() + timedelta(seconds=1),
        )
        for i in range(10)
    ]
    execution.materialize_due(enqueue=enqueue_occurrences, now=timezone.now() + timedelta(seconds=3))
    cluster = spawn("qcluster", env={"Q_WORKERS": "1"})

    def all_done() -> bool:
        """the twenty runs to end"""
        return Run.objects.filter(status__in=Run.TERMINAL).count() == 20

    wait_for(all_done, timeout=60)
    for schedule in failing:
        schedule.refresh_from_db()
        assert schedule.consecutive_failures == 1, read_log(cluster)
    for schedule in slow:
        schedule.refresh_from_db()
        assert (schedule.consecutive_failures, schedule.status) == (0, "completed")
    events = AccountingEvent.objects.all()
    assert sorted(e.payload["status"] for e in events) == ["completed"] * 10 + ["failed"] * 10


def test_another_owner_starts_within_seconds_behind_a_burst(roomy, spawn):
    """The burst fills every slot for half a minute; the other owner's run starts at once."""
    _burst(roomy, 150, model="sim-slow", prompt="Wait on the provider: delay=2")
    other = make_user("other")
    lonely = start_interactive_run(other.pk, make_agent("quick", model="sim-research"), "Hello.")
    from runs.tasks import enqueue_runs

    enqueue_runs([lonely.pk])
    queued_at = timezone.now()
    spawn("qcluster", env={"Q_WORKERS": "1", "RUNS_IN_FLIGHT_PER_WORKER": "10"})

    def started() -> Run | None:
        """the other owner's run to start"""
        return Run.objects.filter(pk=lonely.pk, started_at__isnull=False).first()

    run = wait_for(started, timeout=30, interval=0.1)
    behind = Run.objects.filter(owner=roomy, status="queued").count()
    assert behind > 100  # the burst is still waiting for slots
    assert (run.started_at - queued_at).total_seconds() < 3 + 2  # the cluster's own start-up: ~2 s


# -- in-process -----------------------------------------------------------------------------------


def test_a_turn_claims_the_owner_with_fewest_running_first_then_the_oldest(owner):
    busy_agent = make_agent(model="sim-research")
    first, second = (start_interactive_run(owner.pk, busy_agent, "Research.") for _ in range(2))
    claim_run(first)
    other = make_user("other")
    newcomer = start_interactive_run(other.pk, busy_agent, "Research.")

    claimed = inflight.claim_next()
    assert claimed.pk == newcomer.pk  # nothing running for this owner: first, though newest
    assert inflight.claim_next().pk == second.pk
    assert inflight.claim_next() is None


def test_a_turn_starts_its_runs_on_threads_and_a_second_turn_finds_nothing(owner):
    # Each answer takes a second: a run that ended at once would have its slot claim the next
    # queued run (as it should) before the turn got to it, and the turn would start only two.
    agent = make_agent(model="sim-slow")
    runs = [start_interactive_run(owner.pk, agent, "Research.") for _ in range(3)]

    started = inflight.take_turn()
    assert sorted(run.pk for run in started) == [run.pk for run in runs]
    assert inflight.take_turn() == []

    def done() -> bool:
        """the three threads to finish their runs"""
        return Run.objects.filter(status="completed").count() == 3

    wait_for(done, timeout=30)
    assert inflight.flights().count() == 0


def _request() -> ModelRequest:
    return ModelRequest(
        model="gpt-4o", system="", messages=(Message(role="user", content="Hi"),), max_output_tokens=16
    )


_OK = {
    "id": "chatcmpl-1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


def test_a_429_to_one_run_pauses_the_others_sharing_the_provider(settings):
    """A 429 with Retry-After: 1 (OpenAI's shape, from its rate-limit guide) to one run: the other
    runs' requests wait out that second instead of each meeting the limit on its own."""
    settings.PROVIDER_MAX_RETRIES = 3
    arrivals: list[float] = []
    lock = threading.Lock()
    state = {"limited_at": None}

    def provider(request: httpx.Request) -> httpx.Response:
        with lock:
            now = time.monotonic()
            arrivals.append(now)
            if state["limited_at"] is None:
                state["limited_at"] = now
                return httpx.Response(
                    429,
                    headers={"retry-after": "1"},
                    json={"error": {"message": "Rate limit reached", "type": "requests"}},
                )
        return httpx.Response(200, json=_OK)

    url = f"https://shared-{time.monotonic_ns()}.example/v1"
    client = httpx.Client(transport=httpx.MockTransport(provider))
    adapter = OpenAIAdapter(client, name="openai", base_url=url, api_key="sk-test")
    first = threading.Thread(target=call_with_retries, args=(adapter, _request()))
    first.start()
    while state["limited_at"] is None:
        time.sleep(0.005)
    others = [threading.Thread(target=call_with_retries, args=(adapter, _request())) for _ in range(10)]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(timeout=10)
    assert len(arrivals) == 12  # the limited request, its retry, ten others: no second 429 storm
    limited_at = state["limited_at"]
    assert all(t >= limited_at + 0.95 for t in arrivals[1:])


def test_requests_to_one_provider_are_capped_per_worker(settings):
    settings.PROVIDER_CONCURRENCY_PER_WORKER = 3
    open_now = peak = 0
    lock = threading.Lock()

    def provider(request: httpx.Request) -> httpx.Response:
        nonlocal open_now, peak
        with lock:
            open_now += 1
            peak = max(peak, open_now)
        time.sleep(0.1)
        with lock:
            open_now -= 1
        return httpx.Response(200, json=_OK)

    url = f"https://capped-{time.monotonic_ns()}.example/v1"
    adapter = OpenAIAdapter(
        httpx.Client(transport=httpx.MockTransport(provider)), name="openai", base_url=url, api_key="sk-test"
    )
    threads = [threading.Thread(target=call_with_retries, args=(adapter, _request())) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert peak == 3


def test_a_run_stopped_while_it_queues_for_a_provider_slot_sends_nothing(settings):
    settings.PROVIDER_CONCURRENCY_PER_WORKER = 1
    requests: list[float] = []
    inside = threading.Event()

    def provider(request: httpx.Request) -> httpx.Response:
        requests.append(time.monotonic())
        inside.set()
        time.sleep(0.5)
        return httpx.Response(200, json=_OK)

    url = f"https://one-slot-{time.monotonic_ns()}.example/v1"
    adapter = OpenAIAdapter(
        httpx.Client(transport=httpx.MockTransport(provider)), name="openai", base_url=url, api_key="sk-test"
    )
    first = threading.Thread(target=call_with_retries, args=(adapter, _request()))
    first.start()
    inside.wait(timeout=5)

    class Stopped(Exception):
        pass

    def stopped_meanwhile(attempt: int) -> None:
        if attempt == GATE_WAITED:  # Stop was pressed while it queued for the slot
            raise Stopped

    with pytest.raises(Stopped):
        call_with_retries(adapter, _request(), before_attempt=stopped_meanwhile)
    first.join(timeout=5)
    assert len(requests) == 1  # the stopped run sent nothing


def test_a_rate_limit_on_one_key_does_not_hold_back_another_keys_runs(settings):
    settings.PROVIDER_MAX_RETRIES = 0
    sent: list[str] = []

    def provider(request: httpx.Request) -> httpx.Response:
        key = request.headers["authorization"]
        sent.append(key)
        if key.endswith("limited"):
            return httpx.Response(
                429, headers={"retry-after": "30"}, json={"error": {"message": "Rate limit"}}
            )
        return httpx.Response(200, json=_OK)

    url = f"https://per-key-{time.monotonic_ns()}.example/v1"
    client = httpx.Client(transport=httpx.MockTransport(provider))
    limited = OpenAIAdapter(client, name="openai", base_url=url, api_key="sk-limited")
    other = OpenAIAdapter(client, name="openai", base_url=url, api_key="sk-other")
    with pytest.raises(ProviderError):
        call_with_retries(limited, _request())
    sleeps: list[float] = []
    call_with_retries(other, _request(), sleep=sleeps.append)
    assert sleeps == [] and sent[-1].endswith("other")  # sent at once, not after the 30 s hold
    with pytest.raises(ProviderError):
        call_with_retries(limited, _request(), sleep=sleeps.append)
    assert sleeps and sleeps[0] > 25  # the limited key's next request waits out its hold


def test_a_turn_that_fails_after_taking_its_task_hands_a_new_one_to_the_queue(owner, monkeypatch):
    agent = make_agent(model="sim-research")
    start_interactive_run(owner.pk, agent, "Research.")
    handed_back: list[bool] = []

    def broken() -> Run | None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(inflight, "claim_next", broken)
    assert inflight.take_turn(again=lambda: handed_back.append(True)) == []
    assert handed_back == [True]  # the queued run still has a task
    slots = inflight.flights().slots
    taken = [slots.acquire(blocking=False) for _ in range(inflight.CLAIMS_PER_TURN)]
    assert all(taken)  # every slot the turn held was given back
    for _ in taken:
        slots.release()


def test_a_full_worker_never_waits_for_a_slot_and_a_freed_slot_takes_the_next_run(owner, settings):
    """The worker's main thread stays free for the tick and the reaper: a turn with no free slot
    ends at once, and the run it could not claim is claimed by the run in flight as it ends."""
    settings.RUNS_IN_FLIGHT_PER_WORKER = 1
    inflight.forget_inherited_flights()  # this process's slots, made again at the new size
    try:
        agent = make_agent(model="sim-slow")
        first, second = (start_interactive_run(owner.pk, agent, "Wait: delay=1") for _ in range(2))
        assert [run.pk for run in inflight.take_turn()] == [first.pk]
        began = time.monotonic()
        assert inflight.take_turn() == []  # every slot taken: the turn ends, it does not wait
        assert time.monotonic() - began < 0.5

        def both_done() -> bool:
            """the second run, claimed by the first's slot as it ended"""
            return Run.objects.filter(status="completed").count() == 2

        wait_for(both_done, timeout=30)
        second.refresh_from_db()
        assert second.started_at >= Run.objects.get(pk=first.pk).finished_at
    finally:
        inflight.forget_inherited_flights()
