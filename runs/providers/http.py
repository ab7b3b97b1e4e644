"""What every HTTP adapter does the same way: post the request asking for a stream, read the events
as they come (or the whole body, from a server that ignores `stream`), classify a failure
(docs/contract.md#providers-and-failures), and tell a call that was cut from one that was never made
(docs/decisions/0006-streaming.md). Each provider's file holds only what differs: its endpoint and
headers, how a request is written, how a whole response and a stream of events are read. Retries
are runs.providers.retry's; the shared parsing is runs.providers.parsing's."""

from __future__ import annotations

from typing import Any

import httpx

from runs.providers.base import ModelRequest, ModelResponse, ProviderError, diagnostics
from runs.providers.classify import classify_response, classify_transport_error, is_error_body
from runs.providers.parsing import read_json
from runs.providers.stream import CutCall, Parser, Streamed, Watch, events, is_event_stream

# Before the response's headers, these mean the request never reached the provider whole: nothing
# was generated, nothing is billed. Any other failure after the request was sent may have been.
_NOT_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
    httpx.ProxyError,
)

_CUT_MESSAGES = {
    "stopped": "The run was stopped while the provider was answering.",
    "deadline": "The run's time limit ended while the provider was answering.",
    "idle": "The provider sent nothing for longer than the idle timeout while it was answering.",
    "first_token": "The provider had not begun its answer within the first-token timeout.",
    "reset": "The connection to the provider broke before its answer was complete.",
    "garbled": "The provider's response could not be decoded.",
}


class HttpAdapter:
    """One request, no retries (runs.providers.retry does those). Subclasses set `path` and
    `code_from` (which error field names the provider's code) and write `headers`, `body`,
    `parse` (a whole JSON response) and `parser` (a stream of events)."""

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

    def parser(self, watch: Watch) -> Parser:
        raise NotImplementedError

    def complete(self, request: ModelRequest, watch: Watch | None = None) -> ModelResponse:
        """One streamed request. Raises ProviderError when nothing billable happened (refused, never
        sent), CutCall when the request was sent and did not end whole."""
        watch = watch or Watch()
        parser = self.parser(watch)
        timeout = watch.read_timeout()
        extra: dict[str, Any] = {} if timeout is None else {"timeout": self._timeout(timeout)}
        opened = False
        watch.sending()
        try:
            with self.client.stream(
                "POST", self.url, json=self.body(request), headers=self.headers(), **extra
            ) as response:
                opened = True
                watch.opened(response)
                if response.status_code == 200 and is_event_stream(response):
                    return self._stream(response, parser, watch)
                return self._whole(response, watch)
        except _NOT_SENT as exc:
            if opened or watch.cut_reason:
                raise self._cut(parser, watch, exc) from None
            raise classify_transport_error(self.name, exc) from None
        except (httpx.TransportError, httpx.DecodingError, httpx.StreamError) as exc:
            raise self._cut(parser, watch, exc) from None
        finally:
            watch.closed()

    def _timeout(self, read: float) -> httpx.Timeout:
        base = self.client.timeout
        return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)

    def _stream(self, response: httpx.Response, parser: Parser, watch: Watch) -> ModelResponse:
        for event, data in events(response, watch):
            parser.feed(event, data)
            if parser.error is not None:
                break
            if parser.done:
                break
        if parser.error is not None:
            error = classify_response(
                self.name, 200, response.headers, parser.error, code_from=self.code_from
            )
            if not parser.started():
                raise error  # refused before it generated anything: nothing to bill
            raise CutCall(
                transient=error.transient,
                message=error.message,
                diagnostics=error.diagnostics,
                reason="error_event",
                ours=False,
                streamed=parser.streamed,
            )
        if watch.cut_reason or not parser.complete():
            raise self._cut(parser, watch, None)
        return parser.result()

    def _whole(self, response: httpx.Response, watch: Watch) -> ModelResponse:
        """A server that answered with one JSON body (it ignores `stream`), or an error."""
        watch.chunk(output=True)  # the answer is here: from now on only an idle body is cut
        response.read()
        if watch.cut_reason:
            raise self._cut(None, watch, None)
        try:
            body = read_json(self.name, response)
        except ProviderError as error:  # a 200 that is not JSON: an answer lost on the way
            raise CutCall(
                transient=True,
                message=error.message,
                diagnostics=error.diagnostics,
                reason="garbled",
                ours=False,
                streamed=Streamed(),
            ) from None
        # A 200 can still carry an error (OpenRouter's mid-generation error, Anthropic's error event).
        if response.status_code != 200 or is_error_body(body):
            text = response.text if body is None else ""  # a proxy's HTML page, say
            raise classify_response(
                self.name, response.status_code, response.headers, body, code_from=self.code_from, text=text
            )
        return self.parse(body)

    def _cut(self, parser: Parser | None, watch: Watch, exc: Exception | None) -> CutCall:
        """The call was sent and did not end whole. Ours when the watch cut it or a read timed out
        (the provider may have gone on generating); otherwise the provider or the network ended it."""
        reason = watch.cut_reason
        if not reason:
            reason = "idle" if isinstance(exc, httpx.ReadTimeout) else "reset"
            if reason == "idle" and (parser is None or not parser.started()):
                reason = "first_token"
            if isinstance(exc, httpx.DecodingError):
                reason = "garbled"
        ours = reason not in ("reset", "garbled")
        detail = f" ({type(exc).__name__})" if exc is not None and not watch.cut_reason else ""
        return CutCall(
            transient=reason in ("idle", "first_token", "reset", "garbled"),
            message=_CUT_MESSAGES.get(reason, "The provider's answer was cut.") + detail,
            diagnostics=diagnostics(self.name),
            reason=reason,
            ours=ours,
            streamed=parser.streamed if parser is not None else Streamed(),
        )


__all__ = ["CutCall", "HttpAdapter", "ProviderError"]
