from __future__ import annotations

import os

from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
    verbose_name = "Accounting"

    def ready(self) -> None:
        from accounting.alerts import forget_inherited_standings

        os.register_at_fork(after_in_child=forget_inherited_standings)
