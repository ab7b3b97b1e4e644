from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection, transaction

from schedules.grants import ROLE_TABLES, grant_statements


class Command(BaseCommand):
    help = "Print (or --apply) the least-privilege PostgreSQL grants for the web or scheduler role."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--role", required=True, help="the PostgreSQL role to grant to")
        parser.add_argument(
            "--for", dest="kind", required=True, choices=sorted(ROLE_TABLES), help="what it runs"
        )
        parser.add_argument(
            "--apply", action="store_true", help="run the statements now (as the table owner)"
        )

    def handle(self, *args: Any, role: str, kind: str, apply: bool, **options: Any) -> None:
        existing = set(connection.introspection.table_names())
        statements = grant_statements(role, kind, existing)
        if not apply:
            self.stdout.write("\n".join(statements))
            return
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                for index, statement in enumerate(statements, start=1):
                    cursor.execute(statement)
                    self.stdout.write(f"[{index}/{len(statements)}] {statement}")
        except DatabaseError as exc:
            raise CommandError(
                f"Granting failed, nothing was changed: {str(exc).strip().splitlines()[0]}"
            ) from None
        self.stdout.write(self.style.SUCCESS(f"Granted the {kind} privileges to {role}."))
