"""The run layer's own tools: clock.now, http.fetch and agent.delegate."""

from __future__ import annotations

import zoneinfo

import httpx
from django.conf import settings
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field

from runs import outbound
from runs.tools import Tool, ToolContext, ToolError, register


class NoArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


def clock_now(_: NoArguments, context: ToolContext) -> str:
    zone = zoneinfo.ZoneInfo(context.owner_timezone)
    now = timezone.now().astimezone(zone)
    return f"{now.isoformat(timespec='seconds')} ({zone.key}, {now:%A})"


class FetchArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(max_length=2000, description="An http(s) URL on an allowed host.")


def http_fetch(arguments: FetchArguments, context: ToolContext) -> str:
    # Parsed by the code that sends it: a URL httpx cannot send (a tab, a bad port) is an error
    # result the model can correct, never a failed run.
    try:
        url = httpx.URL(outbound.normalize_url(arguments.url, field="url"))
    except outbound.UnsafeURL as exc:
        raise ToolError(str(exc)) from None
    allowed = settings.HTTP_FETCH_ALLOWED_HOSTS
    if url.host not in allowed:
        raise ToolError(f"host {url.host!r} is not on the allow-list")
    limit = settings.HTTP_FETCH_MAX_BYTES
    try:
        with context.http.stream(
            "GET", url, timeout=settings.HTTP_FETCH_TIMEOUT_SECONDS, follow_redirects=False
        ) as response:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    break
            status = response.status_code
            encoding = response.encoding or "utf-8"
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise ToolError(f"fetch failed: {type(exc).__name__}") from None
    # NUL is replaced like any undecodable byte: PostgreSQL cannot store it in the transcript.
    text = b"".join(chunks)[:limit].decode(encoding, errors="replace").replace("\x00", "\ufffd")
    truncated = " (truncated)" if size > limit else ""
    return f"HTTP {status}{truncated}\n{text}"


class DelegateArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=8000, description="What the delegated run should do.")
    agent: str | None = Field(default=None, max_length=64, description="Agent name; default: this agent.")


def agent_delegate(arguments: DelegateArguments, context: ToolContext) -> str:
    child = context.delegate(task=arguments.task, agent_name=arguments.agent)
    if child.status == "completed":
        return child.answer
    raise ToolError(f"the delegated run {child.status}: {child.failure_reason or 'no answer'}")


def register_builtin_tools() -> None:
    register(
        Tool(
            "clock.now",
            "The current date and time in the owner's time zone.",
            NoArguments,
            clock_now,
            instant=True,
        )
    )
    register(
        Tool(
            "http.fetch",
            "Fetch a web page (GET) from an allowed host; returns status and text.",
            FetchArguments,
            http_fetch,
        )
    )
    register(
        Tool(
            "agent.delegate",
            "Hand a sub-task to a delegated run with part of this run's remaining budget; "
            "returns its answer.",
            DelegateArguments,
            agent_delegate,
        )
    )
