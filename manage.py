#!/usr/bin/env python
"""Django's command-line utility."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from config.database import refusal

    try:
        # A command that needs the database and has none says so in one line, at once, instead
        # of waiting on the connection pool and ending in a traceback.
        refused = refusal(sys.argv)
        if refused is not None:
            sys.stderr.write(f"{refused}\n")
            sys.exit(1)
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad setting is one clear line, not a traceback.
        sys.stderr.write(f"Configuration error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
