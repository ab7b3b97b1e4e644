"""Runs against a real model server: llama.cpp's HTTP server with Gemma 3 270M (tests/real_model/
conftest.py), through the product's real adapter, watch and loop; no mock anywhere. The model is a
base model: every text answer runs to the request's cap (`finish_reason: "length"`) and its words are
noise, so these tests assert on the protocol, the usage and the bill, never on wording.

The server's own words are read off the wire: a transport that passes every byte through to the
real server and keeps a copy, parsed here with nothing of the product's, so "the ledger equals what
the server reported" compares two independent readings.
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.db import connection

from accounting.models import LedgerEntry
from runs import inflight
from runs.models import Agent, Run
from runs.pricing import MICRO
from runs.runtime import execute_run
from runs.services import cancel_run, claim_run
from tests.factories import limits, start_interactive_run
from tests.real_model.conftest import PRICES

pytestmark = pytest.mark.django_db


class Tap(httpx.HTTPTransport):
    """The real HTTP transport, keeping a copy of each request body and each response's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.streams: list[bytearray] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.read()))
        response = super().handle_request(request)
        copy = bytearray()
        self.streams.append(copy)
        inner = response.stream

        class Copying(httpx.SyncByteStream):
            def __iter__(self):  # type: ignore[no-untyped-def]
                for chunk in inner:  # type: ignore[union-attr]
                    copy.extend(chunk)
                    yield chunk

            def close(self) -> None:
                inner.close()  # type: ignore[union-attr]

        return httpx.Response(
            response.status_code, headers=response.headers, stream=Copying(), extensions=response.extensions
        )

    def reported_usage(self, index: int) -> dict[str, Any] | None:
        """The usage the server put in call `index`'s stream (its last chunk), read plainly."""
        for line in bytes(self.streams[index]).decode().splitlines():
            if line.startswith("data: {"):
                data = json.loads(line[len("data: ") :])
                if data.get("usage"):
                    return data["usage"]  # type: ignore[no-any-return]
        return None


def _run(owner, agent: Agent, prompt: str = "Say hello.", **limit_overrides: Any) -> tuple[Run, Tap]:
    run = start_interactive_run(
        owner.pk, agent, prompt, limits=limits(**limit_overrides) if limit_overrides else None
    )
    claim_run(run)
    tap = Tap()
    with httpx.Client(transport=tap, timeout=120) as client:
        return execute_run(run, client=client, sleep=lambda s: None), tap


def _price(usage: dict[str, Any]) -> Decimal:
    """What the agent's own prices make of the server's usage: cached input is billed as input when
    the agent gives no cache price (runs.pricing)."""
    per = {kind: Decimal(price) / 1_000_000 for kind, price in PRICES.items()}
    cost = usage["prompt_tokens"] * per["input"] + usage["completion_tokens"] * per["output"]
    return cost.quantize(MICRO, rounding="ROUND_CEILING")


def test_a_run_completes_and_its_ledger_equals_the_usage_the_server_reported(owner, local_agent):
    started = time.monotonic()
    run, tap = _run(owner, local_agent)

    assert run.status == "completed", run.failure_message
    assert run.answer and run.answer_cut  # a base model always writes to its cap
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
    usage = tap.reported_usage(0)
    assert usage is not None  # streamed usage arrived, in the last chunk
    assert (entry.input_tokens, entry.output_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert entry.cache_read_tokens == usage["prompt_tokens_details"]["cached_tokens"]
    assert not entry.estimated and entry.cost == run.cost == _price(usage) > 0
    assert time.monotonic() - started < 60  # a time a person would accept, on a busy machine


def test_the_agents_cap_is_on_the_wire_and_a_length_finish_is_handled(owner, local_agent):
    run, tap = _run(owner, local_agent)

    (body,) = tap.requests
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == local_agent.max_output_tokens == 24
    assert b'"finish_reason":"length"' in bytes(tap.streams[0])
    assert tap.reported_usage(0)["completion_tokens"] == 24  # type: ignore[index]
    assert run.status == "completed" and run.answer_cut


def test_the_answer_arrives_in_many_chunks_and_is_their_text_whole(owner, local_agent):
    run, tap = _run(owner, local_agent)

    pieces = [
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in bytes(tap.streams[0]).decode().splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    ]
    assert len([p for p in pieces if p]) > 5  # streamed, token by token
    assert run.answer == "".join(pieces)


def test_a_stream_idle_past_the_idle_timeout_is_cut_and_charged_an_estimate(owner, local_agent, settings):
    # Between two tokens the server is silent for ~20-50 ms: an idle timeout far below that cuts the
    # call mid-generation, as a provider that stalls would be.
    settings.PROVIDER_IDLE_TIMEOUT_SECONDS = 0.005
    settings.PROVIDER_MAX_RETRIES = 1
    local_agent.max_output_tokens = 400  # so the call is generating when it is cut
    local_agent.save()

    run, tap = _run(owner, local_agent)

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "provider_error",
        "ProviderTransientError",
    )
    assert "idle timeout" in run.failure_message
    entries = list(LedgerEntry.objects.filter(run_id=run.pk).order_by("id"))
    assert len(entries) == len(tap.requests) == 2  # the call and its retry, each a call of its own
    for entry, body in zip(entries, tap.requests, strict=True):
        bound = entry.prices["bound"]
        assert entry.estimated and entry.prices["basis"].startswith("estimate: the call was cut (idle)")
        # Ours was the cut: the provider may have gone on generating up to the cap.
        assert entry.output_tokens == bound["output_cap"] == body["max_tokens"]
        assert 0 < entry.cost <= Decimal(bound["worst"])
        assert tap.reported_usage(entries.index(entry)) is None  # the usage chunk never came
    assert run.cost == sum(e.cost for e in entries) <= run.run_limits.max_cost


@pytest.mark.django_db(transaction=True)
def test_stop_cuts_a_generating_call_within_a_second_and_it_is_charged(owner, local_agent):
    local_agent.max_output_tokens = 2000  # a minute of generation at least: Stop comes mid-way
    local_agent.save()
    run = start_interactive_run(owner.pk, local_agent, "Tell me a long story.")
    claim_run(run)
    tap = Tap()
    done = threading.Event()

    def drive() -> None:
        try:
            with httpx.Client(transport=tap, timeout=120) as client:
                execute_run(Run.objects.get(pk=run.pk), client=client, sleep=lambda s: None)
        finally:
            connection.close()  # this thread's own connection
            done.set()

    thread = threading.Thread(target=drive)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not Run.objects.filter(pk=run.pk).exclude(partial_text="").exists():  # text is arriving
            assert time.monotonic() < deadline, "no streamed text reached the run"
            time.sleep(0.05)
        stopped_at = time.monotonic()
        assert cancel_run(Run.objects.get(pk=run.pk))
        assert done.wait(10)
        took = time.monotonic() - stopped_at
    finally:
        thread.join(30)

    assert took < 1.5  # the watch checks for Stop twice a second and shuts the socket at once
    run.refresh_from_db()
    assert run.status == "cancelled"
    (entry,) = LedgerEntry.objects.filter(run_id=run.pk)  # what was generated is billed
    assert entry.estimated and entry.output_tokens == entry.prices["bound"]["output_cap"] == 2000
    assert run.cost == entry.cost <= run.run_limits.max_cost and not run.open_call


@pytest.mark.django_db(transaction=True)
def test_four_runs_in_flight_at_once_each_complete_and_are_billed_as_reported(owner, local_agent):
    runs = [start_interactive_run(owner.pk, local_agent, f"Say hello, number {n}.") for n in range(4)]

    started = inflight.take_turn()
    assert {r.pk for r in started} == {r.pk for r in runs}
    deadline = time.monotonic() + 180  # the server takes them one at a time (one slot)
    while Run.objects.filter(pk__in=[r.pk for r in runs], status__in=["queued", "running"]).exists():
        assert time.monotonic() < deadline, "the runs in flight did not end"
        time.sleep(0.2)

    for run in Run.objects.filter(pk__in=[r.pk for r in runs]):
        assert run.status == "completed", run.failure_message
        (entry,) = LedgerEntry.objects.filter(run_id=run.pk)
        assert not entry.estimated and entry.output_tokens == 24 and entry.cost == run.cost > 0


def test_a_tool_call_streamed_by_the_real_server_runs_and_the_run_then_answers(owner, local_agent):
    # With the product's chat template the base model does call an offered tool: the call comes
    # as streamed tool-call deltas, assembled, run, and once the tool budget is spent the owed
    # synthesis-only turn (tool_choice none) writes the answer.
    local_agent.tools = ["clock.now"]
    local_agent.max_output_tokens = 32  # room for the call's markup (~24 tokens), no more
    local_agent.save()

    run, tap = _run(
        owner,
        local_agent,
        "What time is it?",
        max_steps=4,
        max_model_calls=4,
        max_tool_calls=1,
        max_cost="1.00",
    )

    assert run.tool_calls == 1 and run.transcript.filter(role="tool", tool_name="clock_now").exists()
    assert b'"tool_calls":[{"index":0' in bytes(tap.streams[0])
    assert run.status == "completed", run.failure_message
    assert tap.requests[-1]["tool_choice"] == "none" and run.synthesis_dimension == "tool_calls"
    entries = LedgerEntry.objects.filter(run_id=run.pk).order_by("id")
    assert [e.output_tokens for e in entries] == [
        tap.reported_usage(i)["completion_tokens"] for i in range(len(tap.requests))
    ]  # type: ignore[index]
