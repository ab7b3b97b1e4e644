"""The request type the owner's views receive: signed in (login_required) and with django-htmx's
`request.htmx`; the decorators of an owner's POST action."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.middleware import HtmxDetails

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails
    user: User  # login_required: never anonymous here


def owner_post(view: View) -> View:
    """An owner's action from a form or with HTMX: POST only (405 otherwise), signed in, and cached
    apart by HX-Request (an HTMX request gets a fragment, a plain POST a redirect)."""
    return require_POST(login_required(vary_on_headers("HX-Request")(view)))


def client_address_rule() -> str:
    """Which address sign-in throttling keys on, in words (the web server logs it at start-up)."""
    proxies = int(getattr(settings, "TRUSTED_PROXY_COUNT", 0))
    if proxies <= 0:
        return (
            "Sign-in throttling keys on the connection's address (REMOTE_ADDR); X-Forwarded-For is "
            "ignored. Behind a proxy, set TRUSTED_PROXY_COUNT to the number of proxies."
        )
    return (
        f"Sign-in throttling keys on the address {proxies} hop{'s' if proxies > 1 else ''} from the right "
        f"of X-Forwarded-For (TRUSTED_PROXY_COUNT={proxies}: the proxies in front of this server), or "
        "the connection's address when the header has fewer hops. Without a proxy, set it to 0."
    )


def client_address(request: HttpRequest) -> str | None:
    """The address a request came from, for sign-in throttling (django-axes): behind
    TRUSTED_PROXY_COUNT proxies it is that many hops from the right of X-Forwarded-For (what
    the nearest trusted proxy saw; anything further left the client can forge), else the
    socket's peer. Behind a proxy REMOTE_ADDR is the proxy itself, for everyone: throttling on it
    would let five wrong passwords from anyone lock every user out."""
    peer = request.META.get("REMOTE_ADDR")
    proxies = int(getattr(settings, "TRUSTED_PROXY_COUNT", 0))
    if proxies <= 0:
        return peer
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    if len(hops) < proxies:
        return peer  # not through the proxies we trust
    try:
        return str(ipaddress.ip_address(hops[-proxies]))
    except ValueError:
        return peer
