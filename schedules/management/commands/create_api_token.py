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
            token, secret = tokens.create_api_token(account, name=name or f"{user} token", scopes=wanted)
        except tokens.InvalidScopes as exc:
            raise CommandError(str(exc)) from None
        if "pin_revision" in token.scopes and not account.has_perm("schedules.pin_revision"):
            self.stderr.write(f"Note: {user} lacks the pin permission, so pinning will still answer 403.")
        self.stdout.write(secret)
