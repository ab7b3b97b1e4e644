"""The simulated provider over real HTTP, and a local webhook receiver: machine endpoints for
development and tests, mounted only when SIMULATOR_ENABLED (config/urls.py)."""

from __future__ import annotations

import json
import logging
import time

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from runs.providers import simulated

logger = logging.getLogger(__name__)


@csrf_exempt  # a machine endpoint speaking the OpenAI wire format; no session, no cookies
@require_POST
def simulator(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The simulated provider over real HTTP (docs/contract.md#the-simulated-provider)."""
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        body = None
    status, headers, payload = simulated.respond(body)
    delay, stall = simulated.pacing(body) if status == 200 else (0.0, 0.0)
    if status == 200 and simulated.wants_stream(body):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = simulated.chunks(payload, usage=usage)
        # A client that goes away ends the stream at its next write (the server closes the generator).
        paced = simulated.paced(events, delay, stall, _sleep)
        return StreamingHttpResponse(paced, content_type="text/event-stream")
    time.sleep(delay + stall)
    response = JsonResponse(payload, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@csrf_exempt  # a machine endpoint; no session, no cookies
@require_POST
def webhook_sink(request: HttpRequest) -> HttpResponse:
    """A local webhook receiver for trying pause notifications in development: it accepts any
    POST, logs its event and signature header (never the body), and answers 204."""
    logger.info(
        "webhook sink: %s, %d bytes, signature %s",
        request.headers.get("X-Schedules-Event", "?"),
        len(request.body),
        request.headers.get("X-Schedules-Signature", "missing")[:20] + "…",
    )
    return HttpResponse(status=204)
