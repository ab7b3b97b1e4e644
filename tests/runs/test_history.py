"""What a message sends of its conversation's earlier exchanges (runs.history):
the newest ones within the agent's turns and token budget, read with one bounded query, however
long the conversation is; the run records what was sent, so the page can say so."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.models import LedgerEntry
from runs import conversations
from runs.history import earlier_exchanges, estimate_tokens
from runs.models import Agent, Conversation, Run, TranscriptEntry
from runs.providers import simulated
from runs.services import claim_run
from runs.transcript import read_history as _history
from tests.factories import chat, limits, make_assistant

pytestmark = pytest.mark.django_db


def _earlier(
    owner, agent, count: int, *, answer: str = "An answer of a few words.", status: str = "completed"
):
    """`count` finished exchanges in one conversation, written in bulk (oldest first)."""
    conversation = Conversation.objects.create(owner=owner, agent=agent, title="A long conversation")
    Run.objects.bulk_create(
        [
            Run(
                owner=owner,
                conversation=conversation,
                agent=agent,
                prompt=f"Question {index:04d}",
                answer=answer if status == "completed" else "",
                status=status,
                failure_reason="provider_error" if status == "failed" else "",
                limits=limits().to_json(),
            )
            for index in range(count)
        ]
    )
    return conversation


def _next(owner, agent, conversation) -> Run:
    run = conversations.send_message(conversation, "And now?", enqueue=lambda ids: None)
    claim_run(run)
    return Run.objects.select_related("agent", "conversation").get(pk=run.pk)


def test_at_1000_earlier_exchanges_only_the_newest_within_the_bound_are_sent_and_read(owner):
    agent = make_assistant(history_turns=20)
    conversation = _earlier(owner, agent, 1000)
    run = _next(owner, agent, conversation)
    # Chosen when the message was queued, and recorded on the run for the page to say so.
    assert (run.history_sent, run.history_omitted) == (20, True)

    with CaptureQueriesContext(connection) as queries:
        messages, entries = _history(run)

    assert len(queries) == 1  # the bounded read of what was chosen, and nothing written
    assert "LIMIT 20" in queries[0]["sql"]
    assert len(messages) == 2 * 20 + 1 and entries == 1
    assert [m.content for m in messages[:2]] == ["Question 0980", "An answer of a few words."]
    assert messages[-2].content == "An answer of a few words." and messages[-1].content == "And now?"


def test_a_first_message_reads_no_history_at_all(owner):
    agent = make_assistant()
    run = conversations.start_conversation(owner.pk, agent, "Hello", enqueue=lambda ids: None)
    claim_run(run)
    run = Run.objects.select_related("agent", "conversation").get(pk=run.pk)
    assert (run.history_sent, run.history_omitted) == (0, False)

    with CaptureQueriesContext(connection) as queries:
        messages, _ = _history(run)

    assert len(queries) == 0 and [m.content for m in messages] == ["Hello"]


def test_the_bounded_read_uses_its_index_not_the_conversations_history(owner):
    agent = make_assistant()
    conversation = _earlier(owner, agent, 1000)
    # Runs of the owner's other conversations since, as a real table has: walking the primary key
    # backwards would step over all of them (alone in the table, this conversation's runs are
    # every row, and any index reads the same 21).
    for _ in range(50):
        _earlier(owner, agent, 100)
    run = _next(owner, agent, conversation)
    query = (
        Run.objects.filter(
            conversation_id=conversation.pk, kind="interactive", status="completed", pk__lt=run.pk
        )
        .order_by("-pk")
        .only("pk", "prompt", "answer")[:21]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")  # the planner sees the rows as they are
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny test table would otherwise be scanned
        cursor.execute("SET LOCAL random_page_cost = 1.1")  # SSD storage, as production has
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        plan = json.dumps(cursor.fetchone()[0])

    assert "run_conversation_history" in plan
    assert '"Actual Rows": 21' in plan  # rows read: what is sent, plus one to know older ones exist


def test_the_token_budget_drops_whole_exchanges_oldest_first(owner):
    agent = make_assistant(history_turns=50, history_tokens=1000)
    conversation = _earlier(owner, agent, 10, answer="x" * 1200)  # about 300 tokens each
    run = _next(owner, agent, conversation)

    window = earlier_exchanges(conversation.pk, agent, before=run.pk)

    assert [r.prompt for r in window.runs] == ["Question 0007", "Question 0008", "Question 0009"]
    assert window.omitted and window.tokens <= 1000
    assert window.tokens == sum(estimate_tokens(r.prompt) + estimate_tokens(r.answer) for r in window.runs)


def test_a_conversation_within_the_bound_is_sent_whole(owner):
    agent = make_assistant()
    conversation = _earlier(owner, agent, 3)
    window = earlier_exchanges(conversation.pk, agent, before=_next(owner, agent, conversation).pk)

    assert [r.prompt for r in window.runs] == ["Question 0000", "Question 0001", "Question 0002"]
    assert window.omitted is False


def test_failed_and_cancelled_exchanges_are_not_sent(owner):
    agent = make_assistant()
    conversation = _earlier(owner, agent, 2, status="failed")
    Run.objects.filter(conversation=conversation).update(status="cancelled", failure_reason="")
    window = earlier_exchanges(conversation.pk, agent, before=_next(owner, agent, conversation).pk)

    assert window.runs == [] and window.omitted is False


def test_what_the_provider_receives_stays_flat_as_the_conversation_grows(owner):
    """The simulated provider bills input tokens by the characters it is sent: at 1,000 earlier
    exchanges a message costs what it costs at 20, not 50 times more."""
    agent = make_assistant(history_turns=20)
    small = _earlier(owner, agent, 20)
    large = _earlier(owner, agent, 1000)

    def input_tokens(conversation) -> int:
        run = chat(owner, agent, "hello again", conversation=conversation)
        return sum(e.input_tokens for e in LedgerEntry.objects.filter(run_id=run.pk))

    assert input_tokens(large) == input_tokens(small)


def test_a_scheduled_occurrences_run_reads_no_history_and_writes_nothing(owner):
    agent = make_assistant()
    conversation = Conversation.objects.create(
        owner=owner, title="Briefing — 3 Sep", metadata={"schedule_id": 1, "occurrence_id": 1}
    )
    run = conversations.create_run(
        owner.pk, agent, "Brief me.", conversation=conversation, limits=agent.limits, attempt=uuid.uuid4()
    )
    run = Run.objects.select_related("agent", "conversation").get(pk=run.pk)

    with CaptureQueriesContext(connection) as queries:
        messages, _ = _history(run)

    assert len(queries) == 0 and [m.content for m in messages] == ["Brief me."]
    assert Run.objects.get(pk=run.pk).history_sent is None


def test_the_bound_is_set_per_agent_and_defaults_to_20_exchanges_and_12000_tokens(db):
    agent = Agent.objects.create(
        name="plain",
        provider="simulated",
        model="sim-assistant",
        prices={"input": "1.00", "output": "1.00"},
        default_limits=limits().to_json(),
    )
    assert (agent.history_turns, agent.history_tokens) == (20, 12_000)


def test_the_instruction_and_tool_traffic_of_earlier_runs_are_not_history(owner):
    agent = make_assistant()
    first = chat(owner, agent, "what time is it?")
    assert TranscriptEntry.objects.filter(run=first, role="tool").exists()
    seen: list[dict] = []

    def record(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        status, headers, payload = simulated.respond(body)
        return httpx.Response(status, headers=headers, json=payload)

    run = conversations.send_message(first.conversation, "thanks", enqueue=lambda ids: None)
    with httpx.Client(transport=httpx.MockTransport(record)) as client:
        conversations.execute_message(run.pk, client=client)

    roles = [m["role"] for m in seen[0]["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert seen[0]["messages"][1]["content"] == first.answer
