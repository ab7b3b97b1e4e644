"""Model calls in flight in this process: each cut when it must be, and its text shown as it is
written (docs/decisions/0006-streaming.md).

The thread that reads a call's stream is blocked in a socket read most of the time, so it cannot
notice by itself that its run was stopped, that the run's deadline passed, or that the provider has
gone quiet. One thread per process (the desk) watches every call in flight in it:

- every TICK it cuts a call past the run's deadline, a provider silent past the idle timeout once
  it has begun answering, or one that has not begun within the first-token timeout;
- every STOP_CHECK it reads, in one statement, which of those calls' runs are no longer running
  under their attempt (Stop, the reaper) and cuts them: Stop closes a generating stream within 1 s;
- and it writes the text each call has streamed so far to its run (`Run.partial_text`), for the
  conversation page and the API: a call's first text at the next TICK, then at most once every
  FLUSH, in one statement for all the runs of the process, however many chunks arrive. A call that
  ends within the TICK writes none: its step records the text.

A cut shuts the call's socket, which ends the blocked read at once; the reading thread then raises
CutCall and the loop charges what the provider billed (runs.runtime). The desk holds one database
connection of its own while calls are in flight and until its thread ends, IDLE_EXIT after the last
call: a run's calls, a tool turn apart, reuse it instead of opening one each.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from typing import Any

import httpx
from django.conf import settings
from django.db import connection

from runs.models import Run
from runs.providers.stream import Watch

logger = logging.getLogger(__name__)

TICK = 0.1  # seconds between the desk's looks at the calls in flight
STOP_CHECK = 0.5  # seconds between its reads of which runs were stopped
FLUSH = 1.0  # a run's streamed text is written at most this often (its first text at once)
IDLE_EXIT = 5.0  # seconds without calls after which the desk's thread ends
RECONNECT = 2.0  # seconds between attempts to reach a database that did not answer

# A run this process cannot see (not committed yet, or deleted) is left alone: the loop finds out
# before its next call.
_STOPPED_SQL = f"""
SELECT w.id FROM unnest(%s::bigint[], %s::uuid[]) AS w(id, attempt)
JOIN {Run._meta.db_table} r ON r.id = w.id
WHERE r.status <> 'running' OR r.attempt IS DISTINCT FROM w.attempt
"""  # noqa: S608 - the table name from model metadata
# The text streamed so far, only onto the call it belongs to (a stale write after the step was
# recorded finds another open call, or none) and never waiting for a row the run's own thread is
# writing (skipped, and written at the next flush).
_FLUSH_SQL = f"""
UPDATE {Run._meta.db_table} r SET partial_text = w.text
FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS w(id, call, text)
WHERE r.id = w.id AND r.open_call->>'id' = w.call
  AND r.id IN (SELECT id FROM {Run._meta.db_table} WHERE id = ANY(%s::bigint[]) FOR UPDATE SKIP LOCKED)
"""  # noqa: S608 - the table name from model metadata


class CallWatch(Watch):
    """One model call of a run, watched by this process's desk while it is on the wire."""

    def __init__(self, run_id: int, attempt: uuid.UUID | None, call_id: str, *, deadline: float) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.call_id = call_id
        self.deadline = deadline  # time.time() at which the run's time is up
        self.lock = threading.Lock()
        self.cut_reason = ""
        self._response: httpx.Response | None = None
        self._sent = self._last = time.monotonic()
        self._answering = False  # generation began: the idle timeout applies, not the first-token one
        self._parts: list[str] = []
        self._unflushed = False
        self._flushed_at: float | None = None

    # -- told by the reading adapter --------------------------------------------------------------

    def sending(self) -> None:
        with self.lock:
            self._sent = self._last = time.monotonic()
            self._answering = False
        _desk.add(self)

    def opened(self, response: httpx.Response) -> None:
        with self.lock:
            self._response = response
            reason = self.cut_reason
        if reason:  # stopped while the request waited for its headers: cut now
            self._shut(response)

    def chunk(self, *, output: bool) -> None:
        self._last = time.monotonic()
        if output:
            self._answering = True

    def text(self, delta: str) -> None:
        # Written at the desk's next look (within TICK): a call that ends before then, as a short
        # tool turn may, costs no write at all; its step records the text for good.
        with self.lock:
            self._parts.append(delta)
            self._unflushed = True

    def read_timeout(self) -> float:
        """A backstop for one read, should the desk be late: the first-token timeout, and never past
        the deadline (a server that does not stream cannot be cut before its headers)."""
        left = self.deadline - time.time()
        return max(0.5, min(settings.PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS, left + 1))

    def closed(self) -> None:
        with self.lock:
            self._response = None
        _desk.remove(self)

    # -- asked by the desk ------------------------------------------------------------------------

    def due(self, now: float, wall: float) -> str:
        """Why the call must be cut now, or ""."""
        if wall >= self.deadline:
            return "deadline"
        if self._answering:
            return "idle" if now - self._last > settings.PROVIDER_IDLE_TIMEOUT_SECONDS else ""
        return "first_token" if now - self._sent > settings.PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS else ""

    def cut(self, reason: str) -> None:
        with self.lock:
            if self.cut_reason:
                return
            self.cut_reason = reason
            response = self._response
        if response is not None:
            self._shut(response)

    def unflushed(self, now: float) -> str | None:
        """The text to write now, if any is new and the last write was FLUSH ago."""
        with self.lock:
            if not self._unflushed or (self._flushed_at is not None and now - self._flushed_at < FLUSH):
                return None
            self._unflushed = False
            self._flushed_at = now
            return "".join(self._parts)

    def reflush(self) -> None:
        """The write did not happen (the row was busy): try again at the next look."""
        with self.lock:
            self._unflushed = True
            self._flushed_at = None

    @staticmethod
    def _shut(response: httpx.Response) -> None:
        """End the blocked read at once: shut the socket down (closing it from another thread would
        not wake the reader), or close a stream that has no socket (a test's transport)."""
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, TLS or not
        else:
            with contextlib.suppress(Exception):
                response.close()


class _Desk:
    """This process's watcher of calls in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watches: set[CallWatch] = set()
        self.thread: threading.Thread | None = None

    def add(self, watch: CallWatch) -> None:
        with self.lock:
            self.watches.add(watch)
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="call-watch", daemon=True)
                self.thread.start()

    def remove(self, watch: CallWatch) -> None:
        with self.lock:
            self.watches.discard(watch)

    def run(self) -> None:
        conn: Any = None
        checked = idle_since = retry_at = 0.0
        complained = -1e9
        try:
            while True:
                time.sleep(TICK)
                now, wall = time.monotonic(), time.time()
                with self.lock:
                    watches = list(self.watches)
                    if not watches and idle_since and now - idle_since > IDLE_EXIT:
                        self.thread = None
                        return
                if not watches:  # the connection is kept for the next call, closed when the thread ends
                    idle_since = idle_since or now
                    continue
                idle_since = 0.0
                for watch in watches:
                    if reason := watch.due(now, wall):
                        watch.cut(reason)
                if conn is None and now < retry_at:
                    continue
                try:
                    if conn is None:
                        conn = _connect()
                    if now - checked >= STOP_CHECK:
                        checked = now
                        _cut_stopped(conn, watches)
                    _flush(conn, watches, now)
                except Exception:  # the database away: cuts by time go on; reconnect in a while
                    if now - complained > 60:
                        logger.warning("the call watch could not reach the database", exc_info=True)
                        complained = now
                    with contextlib.suppress(Exception):
                        conn.close()
                    conn = None
                    retry_at = now + RECONNECT
        finally:
            with contextlib.suppress(Exception):
                conn.close()
            with self.lock:
                if self.thread is threading.current_thread():
                    self.thread = None


def _connect() -> Any:
    import psycopg

    conn = psycopg.connect(**connection.get_connection_params(), autocommit=True)
    # What the watch writes is a view of text that the step will record for good: no commit of it
    # waits for the disk.
    conn.execute("SET synchronous_commit = off")
    return conn


def _cut_stopped(conn: Any, watches: list[CallWatch]) -> None:
    live = [w for w in watches if not w.cut_reason]
    if not live:
        return
    rows = conn.execute(_STOPPED_SQL, [[w.run_id for w in live], [w.attempt for w in live]]).fetchall()
    stopped = {row[0] for row in rows}
    for watch in live:
        if watch.run_id in stopped:
            watch.cut("stopped")


def _flush(conn: Any, watches: list[CallWatch], now: float) -> None:
    due = [(watch, text) for watch in watches if (text := watch.unflushed(now)) is not None]
    if not due:
        return
    ids = [watch.run_id for watch, _ in due]
    params = [ids, [watch.call_id for watch, _ in due], [text for _, text in due], ids]
    try:
        conn.execute(_FLUSH_SQL, params)
    except Exception:
        for watch, _ in due:
            watch.reflush()
        raise


_desk = _Desk()


def forget_inherited_desk() -> None:
    """In a forked child: the parent's calls and thread are not this process's."""
    global _desk
    _desk = _Desk()
