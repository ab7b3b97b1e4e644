"""What a streamed chunk costs the worker: the product's adapter reading an OpenAI-compatible stream
(SSE framing, JSON, the delta assembled, the watch told) against the least any reader must do with
the same bytes (splitting the lines and decoding each chunk's JSON), measured in one run.

    .venv/bin/python tests/bench/bench_streaming.py [--chunks 2000] [--repeat 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DATABASE_URL", "postgres://unused@/unused")  # nothing here touches it
from tests.bench.report import figure, parse_args


def stream(chunks: int) -> bytes:
    """A realistic answer: one word per chunk, as OpenAI and llama.cpp send them, then the usage."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    lines = [
        json.dumps(
            {**base, "choices": [{"index": 0, "delta": {"content": f" word{n}"}, "finish_reason": None}]}
        )
        for n in range(chunks)
    ]
    lines.append(json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": chunks + 10}
    lines.append(json.dumps({**base, "choices": [], "usage": usage}))
    return b"".join(f"data: {line}\n\n".encode() for line in lines) + b"data: [DONE]\n\n"


def main() -> None:
    import django

    django.setup()
    import httpx

    from runs.providers.base import Message, ModelRequest
    from runs.providers.openai import OpenAIAdapter
    from runs.watch import CallWatch

    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parse_args(parser, quick={"chunks": 500, "repeat": 3})
    body = stream(args.chunks)
    request = ModelRequest(model="m", system="", messages=(Message(role="user", content="Hi"),))
    client = httpx.Client(
        transport=httpx.MockTransport(
            lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
        )
    )
    adapter = OpenAIAdapter(client, name="openai", base_url="https://provider.example/v1")

    class Unwatched(CallWatch):
        """The loop's watch, told of every chunk and every text delta, but not handed to the desk:
        its once-a-second write is not a cost per chunk, and there is no database here."""

        def sending(self) -> None:
            pass

        def closed(self) -> None:
            pass

    def ours() -> None:
        watch = Unwatched(1, None, "call", deadline=time.time() + 60)
        response = adapter.complete(request, watch)
        assert response.usage is not None and response.usage.output_tokens == args.chunks

    def least() -> None:
        with client.stream("POST", adapter.url, json={}) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    json.loads(line[6:])

    timings: dict[str, list[float]] = {"ours": [], "least": []}
    for _ in range(args.repeat):
        for name, work in (("least", least), ("ours", ours)):
            started = time.perf_counter()
            work()
            timings[name].append((time.perf_counter() - started) / (args.chunks + 2) * 1e6)
    ours_us, least_us = statistics.median(timings["ours"]), statistics.median(timings["least"])
    print(
        f"per chunk: the adapter {ours_us:.1f} µs, reading the same SSE and JSON and nothing more "
        f"{least_us:.1f} µs ({ours_us / least_us:.2f}x); {args.chunks} chunks, median of {args.repeat}"
    )
    print(
        f"at 50 chunks a second per run, 1,000 runs in flight cost one worker core "
        f"{ours_us * 50 * 1000 / 1e6 * 100:.1f} % of its time in chunk handling"
    )
    figure(
        "a streamed chunk through the adapter",
        ours_us,
        "µs",
        baseline="reading the same SSE lines and JSON, nothing more",
        baseline_value=least_us,
    )


if __name__ == "__main__":
    main()
