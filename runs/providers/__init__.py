"""Provider adapters and the retry policy around them.

The seam for tests and the simulator is the `httpx.Client` an adapter is given: tests pass a
client over `httpx.MockTransport`; simulated agents without a base URL get the in-process
simulator transport. Nothing patches httpx globally.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import httpx
from django.conf import settings

from runs import outbound
from runs.models import Agent, api_key_setting_problem
from runs.providers.anthropic import AnthropicAdapter
from runs.providers.base import Adapter, ModelRequest, ModelResponse, ProviderError, diagnostics
from runs.providers.gate import Passage, gate_for
from runs.providers.openai import OpenAIAdapter
from runs.providers.retry import backoff_delay, with_retries
from runs.providers.simulated import transport as simulator_transport
from runs.providers.stream import CutCall, Watch


def client_for(agent: Agent) -> httpx.Client:
    """A fresh client; simulated agents without a URL stay in-process. A read waits at most the
    first-token timeout: a call's watch cuts an idle stream sooner (runs.watch), and a server that
    does not stream sends its whole answer after thinking as long as a first token may take."""
    timeout = httpx.Timeout(settings.PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS, connect=10)
    if agent.provider == Agent.Provider.SIMULATED and not agent.base_url:
        return httpx.Client(transport=simulator_transport(), timeout=timeout)
    return outbound.client(timeout=timeout, allowed_hosts=settings.PROVIDER_ALLOWED_HOSTS)


class RefusedAdapter:
    """An agent whose credentials may not be used: every request fails permanently, with the
    reason, before anything is sent (an agent saved before today's rules, or edited in the database)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def complete(self, request: ModelRequest, watch: Watch | None = None) -> ModelResponse:
        raise ProviderError(transient=False, message=self.reason, diagnostics=diagnostics(self.name))


def adapter_for(agent: Agent, client: httpx.Client) -> Adapter:
    problem = api_key_setting_problem(agent.api_key_setting)
    if problem:
        return RefusedAdapter(agent.provider, f"The agent's api_key_setting {problem}; nothing was sent.")
    if agent.base_url:
        try:
            outbound.normalize_url(agent.base_url, field="The agent's base_url")
        except outbound.UnsafeURL as exc:
            return RefusedAdapter(agent.provider, f"{exc}; nothing was sent.")
    # The key is read at call time from the environment and lives only in this adapter object.
    api_key = os.environ.get(agent.api_key_setting, "") if agent.api_key_setting else ""
    if agent.provider == Agent.Provider.ANTHROPIC:
        return AnthropicAdapter(client, name=agent.provider, base_url=agent.base_url, api_key=api_key)
    base_url = agent.base_url or (
        "http://simulator.local/v1" if agent.provider == Agent.Provider.SIMULATED else ""
    )
    return OpenAIAdapter(client, name=agent.provider, base_url=base_url, api_key=api_key)


# What `before_attempt` is called with when the request waited at its provider's gate (a rate
# limit another run met, or every slot taken): the caller checks Stop and its deadline again.
GATE_WAITED = -1


def call_with_retries(
    adapter: Adapter,
    request: ModelRequest,
    *,
    sleep: Callable[[float], None] = time.sleep,
    before_attempt: Callable[[int], None] | None = None,
    watch: Watch | None = None,
) -> ModelResponse:
    """One model request, retrying transient errors up to PROVIDER_MAX_RETRIES times
    (docs/contract.md#providers-and-failures).

    Raises the last ProviderError when retries are spent, or the first permanent one; a CutCall at
    once, whatever its class: the cut call was billed, and the loop charges it before any retry (a
    retry is a new call with its own bound). `before_attempt` lets the run loop check for
    cancellation between attempts, and after a wait its provider's gate imposed (a rate limit
    another run met: runs.providers.gate). `watch` hears of the call as it streams.
    """
    gate = gate_for(adapter.name, getattr(adapter, "base_url", "") or "", getattr(adapter, "gate_key", ""))
    passage = Passage(gate, sleep, lambda: before_attempt(GATE_WAITED) if before_attempt else None)
    attempts = 0

    def attempt() -> ModelResponse:
        nonlocal attempts
        attempts += 1
        with passage.open():
            try:
                return adapter.complete(request, watch)
            except ProviderError as error:
                if error.diagnostics.http_status == 429:  # the provider's limit: all its runs wait
                    gate.hold(error.retry_after or backoff_delay(attempts - 1, None))
                raise

    return with_retries(
        attempt,
        retries=settings.PROVIDER_MAX_RETRIES,
        sleep=passage.pause,
        before_attempt=before_attempt,
        final=lambda error: isinstance(error, CutCall),
    )


__all__ = [
    "GATE_WAITED",
    "Adapter",
    "CutCall",
    "ProviderError",
    "adapter_for",
    "backoff_delay",
    "call_with_retries",
    "client_for",
]
