"""Plain factory functions for tests. Everything goes through the real services."""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.utils import timezone

from accounting import ledger
from runs.limits import RunLimits
from runs.models import Agent, Conversation, Run
from runs.services import admit_runs, create_run, interactive_limits
from schedules import services
from schedules.models import Occurrence, Schedule
from schedules.schemas import parse_create

PASSWORD = "correct horse battery staple"  # every user make_user makes
_counter = itertools.count(1)


def make_user(
    username: str | None = None, *, staff: bool = False, pin: bool = False, tz: str = "UTC"
) -> User:
    user = User.objects.create_user(username or f"user{next(_counter)}", password=PASSWORD)
    if staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    if pin:
        user.user_permissions.add(Permission.objects.get(codename="pin_revision"))
        user = User.objects.get(pk=user.pk)  # drop the permission cache
    budget = ledger.budget_for(user.pk)
    budget.timezone = tz
    budget.save(update_fields=["timezone"])
    return user


def limits(**overrides: Any) -> RunLimits:
    values: dict[str, Any] = {
        "max_steps": 10,
        "max_model_calls": 10,
        "max_tool_calls": 6,
        "max_cost": "5.00",
        "synthesis_reserve_steps": 0,
        "synthesis_reserve_model_calls": 0,
        "synthesis_reserve_tool_calls": 0,
        "synthesis_reserve_cost": "0",
    }
    values.update(overrides)
    return RunLimits.model_validate(values)


def make_agent(
    name: str | None = None,
    *,
    model: str = "sim-research",
    provider: str = Agent.Provider.SIMULATED,
    cost_limit: Decimal | str | None = None,
    tools: list[str] | None = None,
    base_url: str = "",
    input_price: str = "3.00",
    output_price: str = "15.00",
    prices: dict[str, str] | None = None,
    max_output_tokens: int | None = None,
    **limit_overrides: Any,
) -> Agent:
    """An agent with its own input and output prices (USD per million tokens), or `prices` by kind (`{}`:
    the price catalogue's, for a model it knows). sim-expensive gets the demo's dear output price, at
    which its calls cost about USD 0.60 (docs/contract.md#the-simulated-provider)."""
    if prices is None and model == "sim-expensive":
        from runs.providers.simulated import EXPENSIVE_PRICES

        prices = EXPENSIVE_PRICES
    return Agent.objects.create(
        name=name or f"agent-{next(_counter)}",
        provider=provider,
        model=model,
        base_url=base_url,
        tools=["clock.now"] if tools is None else tools,
        prices={"input": input_price, "output": output_price} if prices is None else prices,
        default_limits=limits(**limit_overrides).to_json(),
        cost_limit=Decimal(cost_limit) if cost_limit is not None else None,
        **({} if max_output_tokens is None else {"max_output_tokens": max_output_tokens}),
    )


def make_schedule(
    owner: User,
    agent: Agent,
    *,
    title: str = "Morning briefing",
    prompt: str = "Research today's technology news and write a briefing.",
    cron: str | None = "0 9 * * *",
    tz: str = "Europe/Riga",
    run_at: datetime | None = None,
    now: datetime | None = None,
) -> Schedule:
    data: dict[str, Any] = {"title": title, "prompt": prompt, "agent": agent.name}
    if run_at is not None:
        data["run_at"] = run_at
    else:
        data.update(cron=cron, timezone=tz)
    return services.create_schedule(owner, parse_create(data), via="test", now=now)


def materialize(
    schedule: Schedule, *, scheduled_for: datetime | None = None, status: str = Run.Status.RUNNING
) -> Occurrence:
    """An occurrence with a claimed run, as the occurrence task would leave it mid-flight."""
    schedule.refresh_from_db()
    revision = schedule.revision
    when = scheduled_for or timezone.now() - timedelta(seconds=next(_counter))
    occurrence = Occurrence.objects.create(
        schedule=schedule, scheduled_for=when, revision=revision, outcome=Occurrence.Outcome.RUNNING
    )
    conversation = Conversation.objects.create(
        owner_id=schedule.owner_id,
        title=f"{schedule.title} — {when:%Y-%m-%d}",
        metadata={
            "schedule_id": schedule.pk,
            "occurrence_id": occurrence.pk,
            "scheduled_for": when.isoformat(),
        },
    )
    run = create_run(
        schedule.owner_id,
        revision.agent,
        revision.prompt,
        conversation=conversation,
        limits=revision.run_limits,
        attempt=uuid.uuid4() if status == Run.Status.RUNNING else None,
    )
    Occurrence.objects.filter(pk=occurrence.pk).update(run=run, attempt=run.attempt)
    occurrence.refresh_from_db()
    return occurrence


def finish(occurrence: Occurrence, status: str = Run.Status.COMPLETED, failure: Any = None) -> Run:
    """End the occurrence's run through the one terminal write path."""
    from runs.failures import Outcome
    from runs.services import finish_run

    run = Run.objects.get(pk=occurrence.run_id)
    assert finish_run(
        run,
        Outcome(status=status, failure=failure, answer="done" if status == "completed" else ""),
        attempt=run.attempt,
    )
    run.refresh_from_db()
    return run


def fail(occurrence: Occurrence, failure: Any = None) -> Run:
    from runs.failures import BudgetExhausted

    return finish(
        occurrence,
        Run.Status.FAILED,
        failure or BudgetExhausted("The cost limit is used up.", dimension="cost"),
    )


def run_due(schedule: Schedule, *, at: datetime | None = None) -> Run | None:
    """The real tick at `at` (default: the schedule's next slot, just after) and the real
    occurrence task, in-process against the simulated provider."""
    from schedules.execution import execute_occurrence, materialize_due

    schedule.refresh_from_db()
    assert schedule.next_occurrence_at is not None
    when = at or schedule.next_occurrence_at + timedelta(seconds=5)
    enqueued: list[int] = []
    materialize_due(enqueue=enqueued.extend, now=when)
    runs = [execute_occurrence(occurrence_id, sleep=lambda s: None) for occurrence_id in enqueued]
    schedule.refresh_from_db()
    return runs[-1] if runs else None


def spend(owner_id: int, cost: str | Decimal, **about: Any) -> None:
    """A ledger entry, as a provider call records it (`about`: a_call's keywords)."""
    ledger.record_usage(a_call(owner_id, cost, **about))


def a_call(
    owner_id: int,
    cost: str | Decimal,
    *,
    run_id: int = 1,
    schedule_id: int | None = None,
    at: datetime | None = None,
    tokens: tuple[int, int] = (1000, 200),
    step: int | None = None,
) -> ledger.Call:
    """A provider call as the ledger records it (not yet written): its output charged `cost`."""
    return ledger.Call(
        owner_id=owner_id,
        run_id=run_id,
        schedule_id=schedule_id,
        provider="simulated",
        model="sim-research",
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cost=Decimal(cost),
        computed_cost=Decimal(cost),
        at=at or timezone.now(),
        step=step,
        charged_by_kind={"output": Decimal(cost)},
    )


ASSISTANT_TOOLS = ["clock.now", "schedule.create", "schedule.update"]


def make_assistant(
    name: str = "sim-assistant",
    *,
    history_turns: int = 20,
    history_tokens: int = 12_000,
    **overrides: Any,
) -> Agent:
    """The simulated assistant with the schedule tools, as demo_data makes it."""
    overrides.setdefault("tools", ASSISTANT_TOOLS)
    agent = make_agent(name, model="sim-assistant", **overrides)
    Agent.objects.filter(pk=agent.pk).update(history_turns=history_turns, history_tokens=history_tokens)
    agent.refresh_from_db()
    return agent


def chat(owner: User, agent: Agent, message: str, *, conversation: Conversation | None = None) -> Run:
    """Send a message through the conversation services and answer it in-process, as the
    message task does in a worker. Returns the run, ended."""
    from runs import conversations

    queued: list[int] = []
    if conversation is None:
        run = conversations.start_conversation(owner.pk, agent, message, enqueue=queued.extend)
    else:
        run = conversations.send_message(conversation, message, enqueue=queued.extend)
    assert queued == [run.pk]
    answered = conversations.execute_message(run.pk, sleep=lambda seconds: None)
    assert answered is not None
    return answered


def answered_conversation(owner: User, agent: Agent, message: str = "Hello") -> Conversation:
    """A conversation the owner started, its first message answered "Hi." (no provider)."""
    from runs import conversations
    from runs.failures import Outcome
    from runs.services import claim_run, finish_run

    run = conversations.start_conversation(owner.pk, agent, message, enqueue=lambda ids: None)
    attempt = claim_run(run)
    assert finish_run(run, Outcome(status=Run.Status.COMPLETED, answer="Hi."), attempt=attempt)
    return run.conversation


def running_run(owner: User, agent: Agent, *, conversation: Conversation | None = None) -> Run:
    """An interactive run a worker is driving right now (claimed, no provider call yet)."""
    if conversation is None:
        conversation = Conversation.objects.create(owner=owner, agent=agent, title="In flight")
    return create_run(
        owner.pk, agent, "Working on it", conversation=conversation, limits=agent.limits, attempt=uuid.uuid4()
    )


def make_budget_paused(owner: User, pinner: User, *, title: str = "Weekly spend review") -> Schedule:
    """A schedule whose runs cost more than its budget, as the demo's: agent sim-expensive (about
    USD 0.60 a call) pinned to USD 1.00 without a reserve, two real runs against the simulated
    provider that each ran out at USD 1.00 (the second call cut at what the dollars left paid for:
    budget exhausted, cost), so it paused itself."""
    from runs.providers.simulated import EXPENSIVE_PRICES
    from schedules.schemas import parse_explicit

    agent = Agent.objects.filter(name="sim-expensive").first() or make_agent(
        "sim-expensive", model="sim-expensive", prices=EXPENSIVE_PRICES
    )
    schedule = make_schedule(owner, agent, title=title)
    tight = limits(max_cost="1.00").to_json()
    services.pin_revision(
        schedule,
        parse_explicit(
            {"limits": tight, "max_consecutive_failures": 2, "reason": "Budget before the chat policy."}
        ),
        by=pinner,
        via="test",
    )
    for _ in range(2):
        run_due(schedule)
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.PAUSED, schedule.status
    return schedule


def start_interactive_run(
    owner_id: int,
    agent: Agent,
    prompt: str,
    *,
    conversation: Conversation | None = None,
    limits: RunLimits | None = None,
) -> Run:
    """A queued interactive run outside the conversation path (which refuses a message whole,
    runs.conversations), admitted by the tick's admission: a refusal leaves it failed
    `admission_denied`. For tests and benches that drive one run of a kind directly."""
    limits = limits or interactive_limits(agent)
    with transaction.atomic():
        if conversation is None:
            conversation = Conversation.objects.create(owner_id=owner_id, title=prompt[:80] or "Conversation")
        run = create_run(owner_id, agent, prompt, conversation=conversation, limits=limits)
        if not admit_runs([ledger.ReservationRequest(owner_id, run.pk, limits.max_cost)]):
            run.refresh_from_db()  # failed admission_denied: it did not fit
    return run


def chat_creates_at_once(owner: User) -> None:
    """The owner turns confirmation off: schedule.create in chat creates the schedule at once, as
    before proposals (docs/contract.md#confirm-before-chat-creates-a-schedule)."""
    from schedules import proposals

    proposals.set_confirmation(owner, False)
