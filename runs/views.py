"""The simulated provider over real HTTP, and a local webhook receiver: machine endpoints for
development and tests, mounted only when SIMULATOR_ENABLED (config/urls.py)."""

from __future__ import annotations

import json
import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from runs.providers import simulated

logger = logging.getLogger(__name__)


@csrf_exempt  # a machine endpoint speaking the OpenAI wire format; no session, no cookies
@require_POST
def simulator(request: HttpRequest) -> HttpResponse:
    """The simulated provider over real HTTP (docs/contract.md#the-simulated-provider)."""
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        body = None
    status, headers, payload = simulated.respond(body)
    response = JsonResponse(payload, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


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
