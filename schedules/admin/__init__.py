"""The Django admin, reading like the dashboard: statuses and failures in words, limits as a table,
revisions numbered with their diffs, and every time in one zone, UTC (the admin's TIME_ZONE).
Explicit revisions (pin) and decisions on revision requests are extra pages (get_urls +
admin_view) that call the services. Each module registers its models; users.py keeps staff with
one permission from granting themselves more."""

from schedules.admin import records, requests, schedule, tokens, users  # noqa: F401 - they register
