"""Validates API responses against the OpenAPI schema the API itself serves.

Every response an `Api` client (tests/api/conftest.py) receives goes through `Contract.check`:
its status must be documented for its operation, and its body must match that status's schema.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.http import HttpResponse
from django.test import Client
from jsonschema import Draft202012Validator, FormatChecker

PREFIX = "/api/v1"

formats = FormatChecker()


@formats.checks("date-time", raises=ValueError)
def _iso_8601_with_offset(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if "T" not in value:
        raise ValueError(f"{value!r} is not an ISO 8601 date and time")
    if datetime.fromisoformat(value).tzinfo is None:
        raise ValueError(f"{value!r} has no UTC offset")
    return True


class Contract:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.components = document["components"]
        self.routes: list[tuple[re.Pattern[str], str]] = []
        for template in document["paths"]:
            pattern = re.sub(r"\\\{[^}]+\\\}", r"[^/]+", re.escape(template))
            self.routes.append((re.compile(f"^{pattern}$"), template))
        # (method, path template, status) of every response checked, for coverage.
        self.seen: set[tuple[str, str, str]] = set()

    def template(self, path: str) -> str | None:
        path = path.split("?", 1)[0]
        return next((template for pattern, template in self.routes if pattern.match(path)), None)

    def operation(self, method: str, path: str) -> dict[str, Any] | None:
        template = self.template(path)
        if template is None:
            return None
        found: dict[str, Any] | None = self.document["paths"][template].get(method.lower())
        return found

    def documented(self) -> set[tuple[str, str, str]]:
        return {
            (method, template, status)
            for template, operations in self.document["paths"].items()
            for method, operation in operations.items()
            for status in operation["responses"]
        }

    def validator(self, schema: dict[str, Any]) -> Draft202012Validator:
        return Draft202012Validator({**schema, "components": self.components}, format_checker=formats)

    def check(self, method: str, path: str, response: HttpResponse) -> None:
        status = response.status_code
        operation = self.operation(method, path)
        template = self.template(path)
        if operation is not None and template is not None:
            self.seen.add((method.lower(), template, str(status)))
        if operation is not None and str(status) not in operation["responses"] and status != 500:
            raise AssertionError(
                f"{method} {path} answered {status}, which its operation does not document "
                f"({sorted(operation['responses'])}): {response.content[:300]!r}"
            )
        if status == 204:
            assert response.content == b"", f"{method} {path}: a 204 has no body"
            return
        assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
        body = json.loads(response.content)
        if operation is None or status == 500:
            schema: dict[str, Any] = {"$ref": "#/components/schemas/Error"}
        else:
            schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
        errors = sorted(self.validator(schema).iter_errors(body), key=lambda e: list(e.path))
        if errors:
            details = "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
            raise AssertionError(f"{method} {path} {status} does not match the schema: {details}")
        if status >= 400:
            error_schema = {"$ref": "#/components/schemas/Error"}
            self.validator(error_schema).validate(body)


@lru_cache(maxsize=1)
def served_contract() -> Contract:
    response = Client().get(f"{PREFIX}/openapi.json")
    assert response.status_code == 200
    return Contract(response.json())
