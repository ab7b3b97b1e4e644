"""An empty answer is not an answer (docs/contract.md#the-run-loop, rule 7, amended): a response with
neither text nor tool calls is a transient provider defect, `provider_error` with provider code
`empty_response`, charged for its usage and retried like any transient error. A small model behind an
OpenAI-compatible server (llama.cpp) answered that way and the run was once recorded `completed`, with
nothing for the owner to read.

The server here is a real HTTP server on localhost speaking llama.cpp's `/v1/chat/completions`
shape (its response carries `timings` and a `system_fingerprint`; the empty message has
`content: ""`), reached through the real adapter and httpx client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from accounting.models import LedgerEntry
from runs.models import Agent
from runs.runtime import execute_run
from runs.services import claim_run
from tests.factories import make_agent, start_interactive_run

pytestmark = pytest.mark.django_db


def _llama_cpp(content: str) -> dict[str, Any]:
    return {
        "choices": [
            {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": content}}
        ],
        "created": 1764750000,
        "model": "qwen2.5-0.5b-instruct-q4_k_m.gguf",
        "system_fingerprint": "b7100-2a8e0bcd",
        "object": "chat.completion",
        "usage": {"completion_tokens": 1, "prompt_tokens": 48, "total_tokens": 49},
        "id": "chatcmpl-4xYbqvKx0s3n8D2K",
        "timings": {"prompt_n": 48, "prompt_ms": 21.4, "predicted_n": 1, "predicted_ms": 8.9},
    }


class FakeLlamaServer:
    """Answers each POST with the next scripted message content (the last one repeats)."""

    def __init__(self, *contents: str) -> None:
        self.contents = list(contents)
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(json.loads(self.rfile.read(length)))
                content = server.contents.pop(0) if len(server.contents) > 1 else server.contents[0]
                body = json.dumps(_llama_cpp(content)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def llama() -> Iterator[type[FakeLlamaServer]]:
    started: list[FakeLlamaServer] = []

    def start(*contents: str) -> FakeLlamaServer:
        server = FakeLlamaServer(*contents)
        started.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in started:
        server.close()


def _run_against(owner, server: FakeLlamaServer):
    agent = make_agent("local-llama", provider=Agent.Provider.OPENAI, base_url=server.url, model="qwen2.5")
    run = start_interactive_run(owner.pk, agent, "What is on today?")
    claim_run(run)
    slept: list[float] = []
    return execute_run(run, sleep=slept.append), slept


def test_an_empty_answer_every_time_fails_the_run_as_a_transient_provider_defect(owner, llama, settings):
    settings.PROVIDER_MAX_RETRIES = 3
    server = llama("")
    run, slept = _run_against(owner, server)

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "provider_error",
        "ProviderTransientError",
    )
    assert (run.provider_code, run.http_status, run.transient) == ("empty_response", 200, True)
    assert "neither text nor a tool call" in run.failure_message
    assert len(server.requests) == 4 and len(slept) == 3  # the first try and three retries, backed off
    entries = LedgerEntry.objects.filter(run_id=run.pk)
    assert entries.count() == 4 and run.model_calls == 4  # each was charged
    assert run.cost == sum(e.cost for e in entries) > 0
    assert not run.transcript.filter(role="assistant").exists()  # nothing to read was kept


def test_an_empty_answer_then_a_real_one_completes_with_the_real_one(owner, llama):
    server = llama("", "   ", "Three things happened today.")
    run, slept = _run_against(owner, server)

    assert run.status == "completed" and run.answer == "Three things happened today."
    assert LedgerEntry.objects.filter(run_id=run.pk).count() == 3 and len(slept) == 2
    # The retries asked the same thing: the empty answers never joined the history.
    assert server.requests[0]["messages"] == server.requests[2]["messages"]


def test_tool_calls_without_text_are_an_answer_not_an_empty_one():
    from runs.providers.base import ModelResponse, ToolCall, Usage

    call = ToolCall(id="c1", name="clock_now", arguments={})
    assert not ModelResponse("", (call,), Usage(1, 1)).is_empty
    assert ModelResponse("\n ", (), Usage(1, 1)).is_empty
    assert not ModelResponse("", (), Usage(0, 0), defect="no usage").is_empty  # a defect of its own
