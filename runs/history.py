"""What a message sends of its conversation's earlier exchanges: a bounded window, newest kept.

An exchange is one earlier completed interactive run: the owner's message and the assistant's
answer (tool calls and results stay with their own run). A conversation grows without end, so
sending all of them would make each message cost more than the last and, past the provider's
context window, fail every later run. Each agent bounds it twice (Agent.history_turns, and
Agent.history_tokens estimated as 4 characters a token): the newest exchanges are kept while
both bounds hold, older ones are dropped whole, never cut mid-message, and never summarized.

Reading it costs one indexed query of at most `history_turns + 1` rows (the extra row says
whether older ones exist), however long the conversation is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runs.models import Agent, Run

CHARS_PER_TOKEN = 4
# Role markers and separators a provider adds around each message, in tokens.
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    """A provider-neutral estimate: about 4 characters per token for English text."""
    return -(-len(text) // CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


@dataclass(frozen=True)
class Window:
    """The earlier exchanges sent, oldest first, and whether older ones were left out."""

    runs: list[Run] = field(default_factory=list)
    omitted: bool = False
    tokens: int = 0


def earlier_exchanges(run: Run, agent: Agent) -> Window:
    """The newest completed interactive runs of `run`'s conversation before it, within the
    agent's bounds (turns and estimated tokens). A scheduled occurrence's run has a
    conversation of its own, so nothing came before it."""
    if run.kind != Run.Kind.INTERACTIVE or run.conversation.is_scheduled:
        return Window()
    newest_first = list(
        Run.objects.filter(
            conversation_id=run.conversation_id,
            kind=Run.Kind.INTERACTIVE,
            status=Run.Status.COMPLETED,
            pk__lt=run.pk,
        )
        .order_by("-pk")
        .only("pk", "prompt", "answer")[: agent.history_turns + 1]
    )
    kept: list[Run] = []
    tokens = 0
    for previous in newest_first[: agent.history_turns]:
        size = estimate_tokens(previous.prompt) + estimate_tokens(previous.answer)
        if tokens + size > agent.history_tokens:
            break
        kept.append(previous)
        tokens += size
    return Window(runs=kept[::-1], omitted=len(newest_first) > len(kept), tokens=tokens)
