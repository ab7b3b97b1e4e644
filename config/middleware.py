"""Request and response rules that hold for every page, the admin and the API alike."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from schedules.api.errors import error_response

Handler = Callable[[HttpRequest], HttpResponse]

NUL = "\x00"
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")  # what request.POST parses
# The longest address served: gunicorn, the production server, refuses a request line longer than
# 4,094 bytes (its limit_request_line) before Django sees it; the development server and the test
# client refuse the same here. No page, form or link of the product comes near it.
MAX_URL_BYTES = 4094

# All assets are served from this origin and no page has an inline script: HTMX runs with
# allowEval off (templates/base.html), so hx-on attributes are not used. Inline *style attributes*
# are allowed (style-src-attr) for the usage bars' widths; <style> elements are not.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "style-src-attr 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)


def refuse_overlong_urls(get_response: Handler) -> Handler:
    """An address (path and query) longer than MAX_URL_BYTES is answered 414 before anything reads
    it: whatever server is in front, no view sees one that production's would have refused, and a
    sign-in redirect never carries it on as a `next` of megabytes that no browser could follow."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if (
            len(request.META.get("PATH_INFO", "")) + len(request.META.get("QUERY_STRING", ""))
            <= MAX_URL_BYTES
        ):
            return get_response(request)
        message = f"The address is longer than {MAX_URL_BYTES:,} bytes, the most this site serves."
        if request.path.startswith("/api/"):
            return error_response(414, "url_too_long", message)
        return _refusal(414, "Address too long", message)

    return middleware


def refuse_nul_characters(get_response: Handler) -> Handler:
    """A NUL character in the path, the query string or a form body of a page is refused with 400
    before any view runs: no text column of PostgreSQL can hold one, so a filter or a search over
    it would fail deep inside the database instead of answering. The API is left to its own typed
    parameters and bodies, which refuse such a value with a 422 naming the field."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/") and _has_nul(request):
            return _refusal(
                400,
                "Bad request",
                "The address or the form contains a NUL character, which cannot be used here.",
            )
        return get_response(request)

    return middleware


def _refusal(status: int, title: str, message: str) -> HttpResponse:
    """A page refused before any view: its title and one sentence (our own words, no markup)."""
    return HttpResponse(
        f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{message}</p>",
        status=status,
        content_type="text/html; charset=utf-8",
    )


def _has_nul(request: HttpRequest) -> bool:
    """Whether the path, the query or a form body carries a NUL. The raw bytes are looked at first
    (a NUL travels as `%00`, or as itself in a multipart body): the query and the form are parsed
    only when one might be there, not on every request."""
    if NUL in request.path:
        return True
    query = request.META.get("QUERY_STRING", "")
    if ("%00" in query or NUL in query) and any(
        NUL in key or any(NUL in v for v in values) for key, values in request.GET.lists()
    ):
        return True
    if request.method == "POST" and request.content_type in FORMS:
        # Read (and keep) the body first: parsing a multipart stream consumes it, and a view that
        # reads request.body afterwards (the simulator, the webhook sink) must still find it.
        body = request.body
        if b"%00" not in body and b"\x00" not in body:
            return False
        return any(NUL in key or any(NUL in v for v in values) for key, values in request.POST.lists())
    return False


def security_headers(get_response: Handler) -> Handler:
    """The Content-Security-Policy on every response (Django 5.2 sets Referrer-Policy and
    X-Content-Type-Options itself: SECURE_REFERRER_POLICY, SECURE_CONTENT_TYPE_NOSNIFF)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response

    return middleware
