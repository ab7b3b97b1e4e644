"""The NinjaAPI of this product: JSON errors everywhere under /api/v1/, request bodies documented
from the shared pydantic models, times rendered with their offset, and a docs page without a CDN.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, path, re_path
from django.utils.html import format_html
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.openapi.docs import DocsBase
from ninja.openapi.schema import REF_TEMPLATE, OpenAPISchema
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder
from pydantic import BaseModel

from accounting.money import MAX_AMOUNT, money_pattern
from schedules.api.errors import error_response, install_error_handlers

# Request bodies are parsed by schedules.schemas (so every surface words its errors alike); the
# schema documents them from the same models.
MONEY_INPUT: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "pattern": money_pattern(), "examples": ["5.00"]},
        {"type": "integer", "minimum": 0, "maximum": int(MAX_AMOUNT) - 1},
    ],
    "description": (
        "USD as a decimal string: ASCII digits, at most one '.', at most 2 decimal places, below "
        "100,000; no sign, exponent or separator (a JSON number with a fraction is refused: it is "
        "a float)."
    ),
}


class ApiJSONEncoder(NinjaJSONEncoder):
    """Times keep their full precision and an explicit offset (+00:00), never a trailing Z."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime):
            return o.isoformat()
        return super().default(o)


class ApiJSONRenderer(JSONRenderer):
    encoder_class = ApiJSONEncoder


class VendoredSwagger(DocsBase):
    """Swagger UI from our own static files (schedules/static/api/), no CDN."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        page = format_html(
            """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{css}">
</head>
<body data-openapi-url="{schema}">
<noscript><p>This page needs JavaScript. The schema itself is at <a href="{schema}">{schema}</a>.</p>
</noscript>
<div id="swagger-ui"></div>
<script src="{bundle}"></script>
<script src="{init}"></script>
</body>
</html>
""",
            title=api.title,
            css=static("api/swagger-ui.css"),
            bundle=static("api/swagger-ui-bundle.js"),
            init=static("api/swagger-ui-init.js"),
            schema=self.get_openapi_url(api, kwargs),
        )
        return HttpResponse(page)


@csrf_exempt  # like every API view: a bearer token, not a cookie, authenticates API requests
def _not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    return error_response(404, "not_found", "There is no such API route; see /api/v1/docs.")


def _json_method_not_allowed(view: Any) -> Any:
    """ninja answers an unsupported method with an empty 405; give it the error shape."""

    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        response = view(request, *args, **kwargs)
        if isinstance(response, HttpResponseNotAllowed):
            allowed = response["Allow"]
            return error_response(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed here; allowed: {allowed}.",
                headers={"Allow": allowed},
            )
        return response

    wrapped.csrf_exempt = True  # type: ignore[attr-defined]
    return wrapped


class ScheduleApi(NinjaAPI):
    def __init__(self, *, body_models: dict[str, type[BaseModel]], **kwargs: Any) -> None:
        super().__init__(renderer=ApiJSONRenderer(), docs=VendoredSwagger(), **kwargs)
        self.body_models = body_models
        install_error_handlers(self)

    def set_default_exception_handlers(self) -> None:
        """None of ninja's: install_error_handlers replaces them all."""

    @property
    def urls(self) -> tuple[list[URLResolver | URLPattern], str, str]:
        patterns, app_name, namespace = super().urls
        routes: list[URLResolver | URLPattern] = []
        for pattern in patterns:
            if isinstance(pattern, URLPattern) and pattern.name == "api-root":
                routes.append(path("", _not_found, name="api-root"))
            elif isinstance(pattern, URLPattern):
                routes.append(
                    URLPattern(
                        pattern.pattern,
                        _json_method_not_allowed(pattern.callback),
                        pattern.default_args,
                        pattern.name,
                    )
                )
            else:
                routes.append(pattern)
        routes.append(re_path(r"", _not_found))  # any other path under the prefix: JSON, not HTML
        return routes, app_name, namespace

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        components = schema["components"]["schemas"]
        for name, model in self.body_models.items():
            document = model.model_json_schema(ref_template=REF_TEMPLATE, mode="validation")
            components.update(document.pop("$defs", {}))
            components[name] = document
        limits = components.get("RunLimits", {}).get("properties", {})
        for money in ("max_cost", "synthesis_reserve_cost"):
            if money in limits:
                limits[money] = {**MONEY_INPUT, "title": limits[money].get("title", money)}
        for body in ("ExplicitRevision", "RevisionRequestBody", "RequestDecision"):
            fields = components.get(body, {}).get("properties", {})
            if "monthly_cap" in fields:  # USD as a decimal string, or null for no cap
                fields["monthly_cap"] = {"anyOf": [MONEY_INPUT, {"type": "null"}], "title": "Monthly Cap"}
        return schema


def json_body(component: str, description: str) -> dict[str, Any]:
    """openapi_extra for an operation whose JSON body is one of the shared models."""
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}},
        }
    }
