from __future__ import annotations

from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
    verbose_name = "Accounting"
