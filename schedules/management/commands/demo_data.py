"""Demo data, created idempotently through the real services and the real run loop.

The owner's history is produced by replaying recent slots: each past slot is materialized by the
real tick at that moment and then executed now against the simulated provider, so every run,
ledger entry, failure classification and pause on the dashboard came from the product itself.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
from django.contrib.auth.models import Permission, User
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from accounting import ledger
from runs import conversations
from runs.limits import RunLimits
from runs.models import Agent
from runs.providers import simulated
from runs.providers.simulated import MODELS
from schedules import execution, proposals, recurrence, services
from schedules.models import Schedule
from schedules.schemas import parse_create, parse_explicit

OWNER_TIME_ZONE = "Europe/Riga"
AGENT_LIMITS = RunLimits(
    max_steps=10,
    max_model_calls=10,
    max_tool_calls=6,
    max_cost=Decimal("5.00"),
    synthesis_reserve_steps=0,
    synthesis_reserve_model_calls=0,
    synthesis_reserve_tool_calls=0,
    synthesis_reserve_cost=Decimal("0"),
)
# The budget a briefing had before docs/decisions/0002: USD 1 and no reserve (pinned explicitly below).
LEGACY_LIMITS = {**AGENT_LIMITS.to_json(), "max_cost": "1.00"}


@dataclass
class DemoSchedule:
    title: str
    agent: str
    cron: str = ""
    prompt: str = "Research what changed since yesterday in AI tooling and write a five-point briefing."
    replay: int = 0  # how many recent slots to run now, oldest first
    run_at_in: timedelta | None = None  # one-time schedules: when, from now (negative: replayed)
    legacy_budget: bool = False
    tight_daily_ceiling: bool = False  # replayed while the owner's daily ceiling was USD 4
    then: list[str] = field(default_factory=list)  # "pause", "resume"


DEMO_SCHEDULES = [
    DemoSchedule("Morning technology briefing", "sim-research", "0 9 * * *", replay=3),
    DemoSchedule(
        "Market research digest (completes through its reserve)", "sim-tool-loop", "30 7 * * 1-5", replay=2
    ),
    DemoSchedule(
        "Pipeline health check (every 2 minutes)",
        "sim-research",
        "*/2 * * * *",
        prompt="Check the clock twice and report that the pipeline is healthy.",
    ),
    DemoSchedule("Anthropic news briefing", "sim-overloaded", "0 8 * * *", replay=2),
    DemoSchedule(
        "Weekly spend review (old USD 1 budget)", "sim-expensive", "0 10 * * 1", replay=2, legacy_budget=True
    ),
    DemoSchedule("Partner quota digest", "sim-quota", "0 12 * * *", replay=1),
    DemoSchedule("Tool-happy research (ignores its reserve)", "sim-ignores-reserve", "0 14 * * *", replay=1),
    DemoSchedule(
        "Release notes roundup (resumed, count kept)",
        "sim-bad-param",
        "0 16 * * *",
        replay=2,
        then=["resume"],
    ),
    DemoSchedule(
        "Deep research (refused by the daily ceiling)",
        "sim-research",
        "0 13 * * *",
        replay=1,
        tight_daily_ceiling=True,
    ),
    DemoSchedule("Flaky provider digest", "sim-flaky", "0 11 * * *", replay=1),
    DemoSchedule("Rate-limited headlines", "sim-rate-limited", "0 6 * * *", replay=1),
    DemoSchedule("Evening summary (paused by owner)", "sim-research", "0 19 * * *", replay=1, then=["pause"]),
    DemoSchedule("Reminder: renew the API key", "sim-research", run_at_in=-timedelta(minutes=5)),
    DemoSchedule("Reminder: quarterly budget check", "sim-research", run_at_in=timedelta(days=3)),
]


# The demo conversation: the owner asks the assistant for two schedules, confirming each proposal
# with "yes" (docs/contract.md#confirm-before-chat-creates-a-schedule), then for a bigger budget,
# which schedule.update refuses. Each message runs through the real loop.
CHAT_AGENT = "sim-assistant"
CHAT_TOOLS = ["clock.now", "schedule.create", "schedule.update"]
CHAT_MESSAGES = [
    "every weekday at 7:30 brief me on AI news",
    "yes",
    "every Monday at 18:00 remind me to review the week's spend",
    "yes",
    "give schedule {first} a USD 20 budget",
]
CHAT_FIRST_TITLE = "AI news briefing"


# The agent on a real model on this machine (config/local_model.py), when `./dev run` started one:
# free to run, but never recorded as free, so it carries prices of its own (a small hosted model's).
LOCAL_AGENT = "local-gemma"
LOCAL_PRICES = {"input": "0.10", "output": "0.40"}


class Command(BaseCommand):
    help = "Create (idempotently) the demo owner, admin, agents and schedules in every state."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--local-model",
            metavar="URL",
            default="",
            help="base URL of a local OpenAI-compatible model server: adds the local-gemma agent on it",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner_password, admin_password = secrets.token_urlsafe(9), secrets.token_urlsafe(9)
        owner = self._user("owner", owner_password, staff=False)
        admin = self._user("admin", admin_password, staff=True)
        budget = ledger.budget_for(owner.pk)
        budget.timezone = OWNER_TIME_ZONE
        budget.save(update_fields=["timezone"])
        self._agents()
        if options["local_model"]:
            self._local_agent(options["local_model"])
        existing = set(Schedule.objects.owned_by(owner).values_list("title", flat=True))
        todo = [demo for demo in DEMO_SCHEDULES if demo.title not in existing]
        for index, demo in enumerate(todo, start=1):
            self.stdout.write(f"[{index}/{len(todo)}] {demo.title} …")
            self._schedule(owner, admin, demo)
        if not Schedule.objects.owned_by(owner).filter(title=CHAT_FIRST_TITLE).exists():
            self.stdout.write("A conversation with the assistant …")
            self._conversation(owner)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write(f"  owner  / {owner_password}   (schedules dashboard)")
        self.stdout.write(f"  admin  / {admin_password}   (Django admin, may pin revisions)")

    def _user(self, username: str, password: str, *, staff: bool) -> User:
        user, _ = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.com"})
        user.set_password(password)
        user.is_staff = user.is_superuser = staff
        user.save()
        if staff:
            user.user_permissions.add(Permission.objects.get(codename="pin_revision"))
        return user

    def _agents(self) -> None:
        for model in MODELS:
            chat = model == CHAT_AGENT
            Agent.objects.get_or_create(
                name=model,
                defaults={
                    "provider": Agent.Provider.SIMULATED,
                    "model": model,
                    "system_prompt": (
                        "You are the owner's assistant. Set up briefings and reminders with the "
                        "schedule tools; their limits are pinned by policy, never by you."
                        if chat
                        else "You are a careful research assistant. Cite what you used."
                    ),
                    "tools": CHAT_TOOLS if chat else ["clock.now"],
                    # The simulated models are ours: they carry their own prices per kind, the
                    # simulator's (runs.providers.simulated), so a reported charge matches.
                    "prices": simulated.EXPENSIVE_PRICES if model == "sim-expensive" else simulated.PRICES,
                    "default_limits": AGENT_LIMITS.to_json(),
                },
            )

    def _local_agent(self, base_url: str) -> None:
        # The model it serves, as the server names it (an OpenAI-compatible server lists it).
        try:
            served = httpx.get(f"{base_url.rstrip('/')}/models", timeout=5).json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            served = "local"
        agent, _ = Agent.objects.get_or_create(
            name=LOCAL_AGENT,
            defaults={
                "provider": Agent.Provider.OPENAI,
                "model": str(served)[:128],
                "system_prompt": "You are a helpful assistant. Answer briefly.",
                "tools": [],
                "prices": LOCAL_PRICES,
                "default_limits": AGENT_LIMITS.to_json(),
                # It writes 30-60 tokens a second here and always to its cap (a base model).
                "max_output_tokens": 256,
            },
        )
        if agent.base_url != base_url:  # a port of this run's choosing
            agent.base_url = base_url
            agent.save(update_fields=["base_url"])
        self.stdout.write(f"Agent {LOCAL_AGENT}: a real model on this machine at {base_url}.")

    def _schedule(self, owner: User, admin: User, demo: DemoSchedule) -> None:
        now = timezone.now()
        data: dict[str, Any] = {"title": demo.title, "prompt": demo.prompt, "agent": demo.agent}
        if demo.run_at_in is not None:
            run_at = now + demo.run_at_in
            data["run_at"] = run_at
            created_at = min(now, run_at) - timedelta(minutes=1)
        else:
            data.update(cron=demo.cron, timezone=OWNER_TIME_ZONE)
            created_at = self._slots_before(demo.cron, now, demo.replay + 1)[0] if demo.replay else now
        schedule = services.create_schedule(owner, parse_create(data), via="demo", now=created_at)
        if demo.legacy_budget:
            services.pin_revision(
                schedule,
                parse_explicit(
                    {
                        "limits": LEGACY_LIMITS,
                        "max_consecutive_failures": 2,
                        "reason": "Budget before the chat policy of 19 Sep 2026: USD 1, no reserve.",
                    }
                ),
                by=admin,
                via="demo",
                now=created_at,
            )
        slots = self._slots_before(demo.cron, now, demo.replay) if demo.replay else []
        if demo.run_at_in is not None and demo.run_at_in < timedelta(0):
            slots = [now + demo.run_at_in]
        budget = ledger.budget_for(owner.pk)
        if demo.tight_daily_ceiling:
            budget.daily_ceiling = Decimal("4.00")
            budget.save(update_fields=["daily_ceiling"])
        try:
            for slot in slots:
                self._replay(schedule, slot)
        finally:
            if demo.tight_daily_ceiling:
                budget.daily_ceiling = None
                budget.save(update_fields=["daily_ceiling"])
        for action in demo.then:
            schedule.refresh_from_db()
            if action == "pause" and schedule.status == Schedule.Status.ACTIVE:
                services.pause_schedule(schedule, by=owner)
            if action == "resume" and schedule.status == Schedule.Status.PAUSED:
                services.resume_schedule(schedule, by=owner)

    def _conversation(self, owner: User) -> None:
        """The owner's messages, each answered by the real run loop in this process (as a
        worker would), so the schedules it creates go through schedule.create in chat."""
        agent = Agent.objects.get(name=CHAT_AGENT)
        conversation = None
        for text in CHAT_MESSAGES:
            first = Schedule.objects.owned_by(owner).filter(title=CHAT_FIRST_TITLE).first()
            message = text.format(first=first.pk if first else "")
            queued: list[int] = []
            if conversation is None:
                run = conversations.start_conversation(owner.pk, agent, message, enqueue=queued.extend)
                conversation = run.conversation
            else:
                proposals.confirm_from_message(conversation, owner, message)
                run = conversations.send_message(conversation, message, enqueue=queued.extend)
            conversations.execute_message(run.pk, sleep=lambda seconds: None)

    def _replay(self, schedule: Schedule, slot: datetime) -> None:
        """The real tick at `slot`, then the real occurrence task, now."""
        collected: list[int] = []
        with transaction.atomic():
            locked = Schedule.objects.select_for_update().get(pk=schedule.pk)
            if locked.status != Schedule.Status.ACTIVE or locked.next_occurrence_at is None:
                return
            if locked.next_occurrence_at > slot:  # replays go oldest first
                return
        execution.materialize_due(enqueue=collected.extend, now=slot + timedelta(seconds=30))
        for occurrence_id in collected:
            execution.execute_occurrence(occurrence_id, sleep=lambda seconds: None)

    @staticmethod
    def _slots_before(cron: str, now: datetime, count: int) -> list[datetime]:
        """The `count` most recent slots before now, oldest first."""
        parsed = recurrence.parse_cron(cron)
        zone = recurrence.parse_timezone(OWNER_TIME_ZONE)
        slots = recurrence.slots_between(parsed, zone, now - timedelta(days=35), now)
        return slots[-count:]
