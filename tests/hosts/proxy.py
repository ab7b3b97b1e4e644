"""A TCP proxy in front of PostgreSQL, one per simulated host, that a test can cut (every connection
closed and new ones refused, as when the host loses its network), slow down, and resume.

It runs an asyncio loop on a daemon thread of the test process; the host's processes reach the
database only through it (their DATABASE_URL names its port), so cutting it partitions that host
alone while the others and the test itself go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable


class Proxy:
    def __init__(self, upstream: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]):
        self.upstream = upstream  # opens a connection to PostgreSQL
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.cut_off = False
        self.delay = 0.0  # seconds each chunk waits, both ways
        self.accepted = 0  # connections let through, over the proxy's life
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, name="db-proxy", daemon=True)

    @classmethod
    def to(cls, host: str, port: int | str | None) -> Proxy:
        """A proxy to the server at `host` (a unix socket directory, or a TCP host) and `port`."""
        number = int(port or 5432)
        if host.startswith("/"):
            path = f"{host}/.s.PGSQL.{number}"
            return cls(lambda: asyncio.open_unix_connection(path))
        return cls(lambda: asyncio.open_connection(host or "localhost", number))

    def start(self) -> int:
        self.thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop
        ).result(10)
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    def cut(self) -> None:
        """Close every connection through the proxy and refuse new ones until `resume`."""
        self._call(self._cut)

    def resume(self) -> None:
        self.cut_off = False
        self.delay = 0.0

    def slow(self, seconds: float) -> None:
        """Every chunk, both ways, waits `seconds` (0: none)."""
        self.delay = seconds

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        self._call(self._close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _call(self, coroutine: Callable[[], Awaitable[None]]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine(), self.loop).result(10)

    async def _cut(self) -> None:
        self.cut_off = True
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()

    async def _close(self) -> None:
        await self._cut()
        if self.server is not None:
            self.server.close()
        # Every connection aborted: each one's task ends as its pipes see it.
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await self.upstream()
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        self.writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self.writers.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                if self.delay:
                    await asyncio.sleep(self.delay)
                if self.cut_off:
                    break
                writer.write(data)
                await writer.drain()
        writer.transport.abort()  # one side ended: so does the other
