"""Talking to the assistant (docs/contract.md#conversations): each message is an interactive run in its
conversation.

Sending a message writes, in one transaction, the conversation (for the first message), the run
with the message as its first transcript entry and the interactive limits of docs/contract.md#the-run-loop,
                                                                                             # its
reservation against the owner's ceilings, and its django-q2 task (through the `enqueue` the
surface passes in: this layer never imports the task layer). Anything refused (an empty or
oversized message, an agent that cannot be used, a run still in flight, a refused admission)
raises before that transaction commits, so nothing is half-written: no conversation without its
first message, no run without its reservation, no task without its run.

A worker then claims the queued run with a conditional update and drives it (`execute_message`);
the sender never waits on the provider.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounting import alerts, ledger
from runs import titles
from runs.models import Agent, Conversation, Run
from runs.runtime import execute_run
from runs.services import claim_run, create_run, interactive_limits

Enqueue = Callable[[list[int]], None]  # run ids; writes their tasks in the caller's transaction

TITLE_CHARS = 80  # visible characters of a first message shown as the conversation's title
TITLE_COLUMN = Conversation._meta.get_field("title").max_length or 200


class InvalidMessage(ValueError):
    """A message or agent that cannot be sent; `fields` maps each field to a plain reason."""

    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        super().__init__("; ".join(fields.values()))


class RunInProgress(Exception):
    """The conversation's previous message is still being answered: one run at a time."""

    message = (
        "The assistant is still answering the previous message. Wait for it to finish, or stop it, "
        "then send this one."
    )


class ScheduledConversation(Exception):
    """A scheduled run's conversation is its record; messages go to a conversation of their own."""

    message = (
        "This conversation is the record of a scheduled run; it takes no messages. "
        "Start a new conversation to talk about it."
    )


class AgentRetired(Exception):
    """The conversation's agent has been retired since (or it never had one): its history cannot
    continue with it."""

    def __init__(self, agent: Agent | None) -> None:
        self.agent = agent
        name = (
            f"The agent {agent.name} of this conversation has been retired"
            if agent
            else ("This conversation has no agent to continue with")
        )
        self.message = f"{name}; start a new conversation with another agent."
        super().__init__(self.message)


class NotAdmitted(Exception):
    """The run does not fit under the owner's ceilings; nothing was written."""

    def __init__(self, refusal: ledger.AdmissionRefused, amount: Decimal) -> None:
        self.ceiling = refusal.ceiling
        self.amount = amount
        self.message = (
            f"Not sent: each message reserves its cost limit until it is answered, and {refusal.message}. "
            f"It fits again once the {refusal.ceiling} spend leaves room, or an admin raises the ceiling."
        )
        super().__init__(self.message)


def max_message_chars() -> int:
    return int(settings.CONVERSATION_MESSAGE_MAX_CHARS)


def parse_message(value: object) -> str:
    """The message as it will be stored and sent: text, not blank, within the limit, storable."""
    limit = max_message_chars()
    if not isinstance(value, str):
        raise InvalidMessage({"message": "message must be text"})
    text = value.strip()
    if not text:
        raise InvalidMessage({"message": "message must not be empty: write what you would like to ask"})
    if len(text) > limit:
        raise InvalidMessage(
            {"message": f"message must be at most {limit:,} characters (this one has {len(text):,})"}
        )
    if "\x00" in text:
        raise InvalidMessage({"message": "message must not contain NUL characters"})
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessage({"message": "message must be valid Unicode text"}) from None
    return text


def usable_agent(name: object) -> Agent:
    """An active agent by name; anything else is a field error (agents are shared, never an
    owner's own: one that is retired or does not exist cannot be used)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidMessage({"agent": "agent must name an agent, for example sim-assistant"})
    agent = Agent.objects.filter(name=name.strip(), is_active=True).first()
    if agent is None:
        raise InvalidMessage({"agent": f"there is no active agent named {name.strip()[:64]!r} you can use"})
    return agent


def last_agent(owner_id: int) -> Agent | None:
    """The agent of the owner's newest conversation they started, if it is still active."""
    conversation = (
        Conversation.objects.filter(owner_id=owner_id, agent__isnull=False, agent__is_active=True)
        .select_related("agent")
        .order_by("-last_activity_at", "-id")
        .first()
    )
    return conversation.agent if conversation is not None else None


def start_conversation(owner_id: int, agent: Agent, message: str, *, enqueue: Enqueue) -> Run:
    """A new conversation with its first message, queued as an interactive run (see the module
    docstring). Raises NotAdmitted, writing nothing, when the owner's ceilings have no room."""
    now = timezone.now()
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner_id=owner_id,
            agent=agent,
            title=titles.shortened(" ".join(message.split()), shown=TITLE_CHARS, limit=TITLE_COLUMN),
            last_activity_at=now,
        )
        return _queue(conversation, agent, message, enqueue=enqueue)


def send_message(conversation: Conversation, message: str, *, enqueue: Enqueue) -> Run:
    """The next message of a conversation, queued as an interactive run that carries its
    bounded history. Raises RunInProgress while the previous one is queued or running (checked
    under the conversation's row lock, and by a unique index), Conversation.DoesNotExist if it
    was deleted meanwhile, ScheduledConversation, AgentRetired or NotAdmitted, writing nothing."""
    now = timezone.now()
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        if locked is None:
            raise Conversation.DoesNotExist(conversation.pk)
        if locked.is_scheduled:
            raise ScheduledConversation(conversation)
        if locked.runs.filter(kind=Run.Kind.INTERACTIVE).in_flight().exists():
            raise RunInProgress(conversation)
        agent = _agent_of(locked)
        if agent is None or not agent.is_active:
            raise AgentRetired(agent)
        Conversation.objects.filter(pk=locked.pk).update(last_activity_at=now)
        return _queue(locked, agent, message, enqueue=enqueue)


def _agent_of(conversation: Conversation) -> Agent | None:
    if conversation.agent_id is not None:
        return Agent.objects.get(pk=conversation.agent_id)
    # A conversation from before conversations named their agent: its newest run's.
    run = conversation.runs.filter(kind=Run.Kind.INTERACTIVE).select_related("agent").order_by("-pk").first()
    return run.agent if run is not None else None


def _queue(conversation: Conversation, agent: Agent, message: str, *, enqueue: Enqueue) -> Run:
    limits = interactive_limits(agent)
    try:
        with transaction.atomic():
            run = create_run(conversation.owner_id, agent, message, conversation=conversation, limits=limits)
    except IntegrityError:  # another request queued a run here first (the unique in-flight index)
        raise RunInProgress(conversation) from None
    try:
        alerts.admit_one(conversation.owner_id, run_id=run.pk, amount=limits.max_cost)
    except ledger.AdmissionRefused as refusal:
        raise NotAdmitted(refusal, limits.max_cost) from None  # rolls back the run and conversation
    enqueue([run.pk])
    run.conversation = conversation
    return run


def execute_message(
    run_id: int, *, client: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep
) -> Run | None:
    """The worker's side: claim the queued run and drive it to its end. Idempotent: a task
    delivered twice, or one for a run cancelled before a worker took it, does nothing."""
    run = Run.objects.select_related("agent", "conversation").filter(pk=run_id).first()
    if run is None or run.status != Run.Status.QUEUED or claim_run(run) is None:
        return None
    return execute_run(run, client=client, sleep=sleep)
