from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from runs.tools.builtin import register_builtin_tools

        register_builtin_tools()
