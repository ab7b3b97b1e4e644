"""What every HTTP adapter does the same way: post the request, read the body defensively, classify a
failure (docs/contract.md#providers-and-failures), and hand a 200 to the provider's own `parse`. Each
provider's file holds only what differs: its endpoint and headers, how a request is written, how a
response is read. Retries are runs.providers.retry's; the shared parsing is runs.providers.parsing's."""

from __future__ import annotations

from typing import Any

import httpx

from runs.providers.base import ModelRequest, ModelResponse
from runs.providers.classify import classify_response, classify_transport_error, is_error_body
from runs.providers.parsing import read_json


class HttpAdapter:
    """One request, no retries (runs.providers.retry does those). Subclasses set `path` and
    `code_from` (which error field names the provider's code) and write `headers`, `body` and
    `parse`."""

    path = ""
    default_base_url = ""
    code_from = "code"

    def __init__(self, client: httpx.Client, *, name: str, base_url: str, api_key: str = "") -> None:
        self.client = client
        self.name = name
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.url = self.base_url + self.path
        self._api_key = api_key

    @property
    def gate_key(self) -> str:
        """Which rate limit this adapter's requests count against: its provider's, per key
        (runs.providers.gate hashes it; the key itself never leaves this object)."""
        return self._api_key

    def headers(self) -> dict[str, str]:
        raise NotImplementedError

    def body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, body: Any) -> ModelResponse:
        raise NotImplementedError

    def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            response = self.client.post(self.url, json=self.body(request), headers=self.headers())
        except (httpx.TransportError, httpx.DecodingError) as exc:
            raise classify_transport_error(self.name, exc) from None
        body = read_json(self.name, response)
        # A 200 can still carry an error (OpenRouter's mid-generation error, Anthropic's error event).
        if response.status_code != 200 or is_error_body(body):
            text = response.text if body is None else ""  # a proxy's HTML page, say
            raise classify_response(
                self.name, response.status_code, response.headers, body, code_from=self.code_from, text=text
            )
        return self.parse(body)
