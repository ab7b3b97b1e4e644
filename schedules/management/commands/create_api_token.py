from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from schedules import tokens


class Command(BaseCommand):
    help = "Create an API token for USER and print it once (it is stored only as a hash)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="username the token acts as")
        parser.add_argument("--scopes", default="read", help="comma-separated: read,write,pin_revision")
        parser.add_argument("--name", default="", help="a label to recognise the token by")

    def handle(self, *args: Any, user: str, scopes: str, name: str, **options: Any) -> None:
        account = User.objects.filter(username=user).first()
        if account is None:
            raise CommandError(f"There is no user named {user!r}.")
        wanted = [scope.strip() for scope in scopes.split(",") if scope.strip()]
        try:
            _, secret = tokens.create_api_token(account, name=name or f"{user} token", scopes=wanted, by=None)
        except tokens.InvalidScopes as exc:
            raise CommandError(f"{exc}.") from None
        self.stdout.write(secret)
