"""A run's transcript as the loop sees it: the entry written for each message, and the history read
back when a run starts or resumes (docs/contract.md#the-run-loop). The loop (runs.runtime) decides
what is said; runs.steps writes it."""

from __future__ import annotations

from runs.history import sent_exchanges
from runs.models import Run, TranscriptEntry
from runs.providers.base import Message, ToolCall

TOOL_CALL_ID_CHARS = 128  # TranscriptEntry.tool_call_id
TOOL_NAME_CHARS = 64  # TranscriptEntry.tool_name
TOOL_BUDGET_EXHAUSTED = (
    "Error: the tool-call budget of this run is exhausted; answer from the evidence you have."
)


def entry(
    run: Run,
    seq: int,
    role: str,
    step: int,
    content: str,
    *,
    tool_calls: tuple[ToolCall, ...] = (),
    call: ToolCall | None = None,
    is_error: bool = False,
) -> tuple[TranscriptEntry, Message]:
    """A transcript entry and the same message for the in-memory history."""
    row = TranscriptEntry(
        run=run,
        seq=seq,
        step=step,
        role=role,
        content=content,
        tool_calls=[
            {"id": c.id, "name": c.name, "arguments": c.raw_arguments or c.arguments} for c in tool_calls
        ],
        # A model may send any id or tool name; the columns are bounded, the history is not.
        tool_call_id=call.id[:TOOL_CALL_ID_CHARS] if call else "",
        tool_name=call.name[:TOOL_NAME_CHARS] if call else "",
        is_error=is_error,
    )
    message = Message(
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=call.id if call else "",
        tool_name=call.name if call else "",
        is_error=is_error,
    )
    return row, message


def read_history(run: Run) -> tuple[list[Message], int]:
    """The earlier exchanges of the conversation chosen for this run when it was queued (prompt
    and answer of each, runs.history), then this run's own transcript, with the number of its
    transcript entries. The synthesis instruction is never among them."""
    messages: list[Message] = []
    entries = 0
    for prompt, answer in sent_exchanges(run):
        messages += [Message(role="user", content=prompt), Message(role="assistant", content=answer)]
    if run.steps == 0:  # a new run's transcript is its prompt alone: no need to read it back
        return [*messages, Message(role="user", content=run.prompt)], 1
    rows = run.transcript.order_by("seq").values_list(
        "role", "content", "tool_calls", "tool_call_id", "tool_name", "is_error"
    )  # plain tuples: a long transcript is read without a model instance per entry
    for role, content, tool_calls, tool_call_id, tool_name, is_error in rows:
        entries += 1
        calls = tuple(
            ToolCall(
                id=c["id"],
                name=c["name"],
                arguments=c["arguments"] if isinstance(c["arguments"], dict) else None,
                raw_arguments=c["arguments"] if isinstance(c["arguments"], str) else "",
            )
            for c in tool_calls
        )
        # The columns read are Message's fields, in its order.
        messages.append(Message(role, content, calls, tool_call_id, tool_name, is_error))
    return messages, entries
