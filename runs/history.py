"""What a message sends of its conversation's earlier exchanges: a bounded window, newest kept.

An exchange is one earlier completed interactive run: the owner's message and the assistant's
answer (tool calls and results stay with their own run). A conversation grows without end, so
sending all of them would make each message cost more than the last and, past the provider's
context window, fail every later run. Each agent bounds it twice (Agent.history_turns, and
Agent.history_tokens estimated as 4 characters a token): the newest exchanges are kept while
both bounds hold, older ones are dropped whole, never cut mid-message, and never summarized.

The window is chosen when the message is queued (one conversation has one run in flight at a
time, so nothing earlier can change after that) and recorded on the run (`history_sent`,
`history_omitted`), which the page shows. The run reads back exactly those exchanges when it
starts: one indexed query of `history_sent` rows, none for a first message, however long the
conversation is.
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


def earlier_exchanges(conversation_id: int, agent: Agent, *, before: int | None = None) -> Window:
    """The newest completed interactive runs of the conversation (before run `before`, if given),
    within the agent's bounds (turns and estimated tokens): one query of at most
    `history_turns + 1` rows (the extra row says whether older ones exist)."""
    earlier = Run.objects.filter(
        conversation_id=conversation_id, kind=Run.Kind.INTERACTIVE, status=Run.Status.COMPLETED
    )
    if before is not None:
        earlier = earlier.filter(pk__lt=before)
    newest_first = list(earlier.order_by("-pk").only("pk", "prompt", "answer")[: agent.history_turns + 1])
    kept: list[Run] = []
    tokens = 0
    for previous in newest_first[: agent.history_turns]:
        size = estimate_tokens(previous.prompt) + estimate_tokens(previous.answer)
        if tokens + size > agent.history_tokens:
            break
        kept.append(previous)
        tokens += size
    return Window(runs=kept[::-1], omitted=len(newest_first) > len(kept), tokens=tokens)


def sent_exchanges(run: Run) -> list[tuple[str, str]]:
    """(prompt, answer) of the exchanges chosen for `run` when it was queued, oldest first."""
    if not run.history_sent:
        return []
    rows = (
        Run.objects.filter(
            conversation_id=run.conversation_id,
            kind=Run.Kind.INTERACTIVE,
            status=Run.Status.COMPLETED,
            pk__lt=run.pk,
        )
        .order_by("-pk")
        .values_list("prompt", "answer")[: run.history_sent]
    )
    return list(rows)[::-1]
