from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookServer:
    """A real local HTTP endpoint answering with a scripted list of (status, delay[, headers])
    replies."""

    url: str
    replies: list[tuple[Any, ...]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)


@pytest.fixture
def webhook_server() -> Iterator[WebhookServer]:
    server_state = WebhookServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            server_state.received.append(Received(headers=dict(self.headers), body=body))
            status, delay, *extra = server_state.replies.pop(0) if server_state.replies else (200, 0.0)
            time.sleep(delay)
            try:
                self.send_response(status)
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(b"{}")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    server_state.url = f"http://127.0.0.1:{httpd.server_address[1]}/hooks/paused"
    # Polling for shutdown every 50 ms, not the default 500: each test's teardown waits for one poll.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server_state
    httpd.shutdown()
    httpd.server_close()
