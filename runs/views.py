from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from runs.providers import simulated


@csrf_exempt  # a machine endpoint speaking the OpenAI wire format; no session, no cookies
@require_POST
def simulator(request: HttpRequest) -> HttpResponse:
    """The simulated provider over real HTTP (SPEC §9)."""
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        body = None
    status, headers, payload = simulated.respond(body)
    response = JsonResponse(payload, status=status)
    for name, value in headers.items():
        response[name] = value
    return response
