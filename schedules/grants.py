"""Least-privilege PostgreSQL grants for the web and scheduler roles (docs/contract.md#database-roles).

Row locks (SELECT ... FOR UPDATE) need the UPDATE privilege; a scheduler role without it once
failed real runs. Append-only tables get INSERT and SELECT only, so the database itself refuses
to change a ledger entry or an accounting event.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

READ = ("SELECT",)
APPEND = ("SELECT", "INSERT")
WRITE = ("SELECT", "INSERT", "UPDATE")
FULL = ("SELECT", "INSERT", "UPDATE", "DELETE")

# Tables whose rows are locked with SELECT ... FOR UPDATE by both roles.
LOCKED_TABLES = (
    "schedules_schedule",
    "schedules_occurrence",
    "accounting_ownerbudget",
    "runs_run",
    "runs_conversation",
    "schedules_forecaststate",
)

_COMMON = {
    "django_content_type": READ,
    "auth_permission": READ,
    "auth_user": READ,
    "auth_group": READ,
    "auth_user_groups": READ,
    "auth_group_permissions": READ,
    "auth_user_user_permissions": READ,
    "django_migrations": READ,
    "accounting_ledgerentry": APPEND,
    # Added to with every ledger entry (in the worker, and by interactive starts on the web).
    "accounting_spendrollup": WRITE,
    "accounting_usagerollup": WRITE,
    "accounting_accountingevent": APPEND,
    "runs_agent": READ,
    # The forecast's inputs: written with every schedule change (here and in the worker: the tick,
    # a run's end, the chat tools), their writers queued on the owner's ForecastState row.
    "schedules_forecaststate": FULL,
    "schedules_forecastgroup": FULL,
    "schedules_forecastinput": FULL,
}

ROLE_TABLES: dict[str, dict[str, tuple[str, ...]]] = {
    # Owners and admins: dashboard, admin and API. Deleting a schedule or a conversation cascades
    # to its revisions, occurrences, runs and transcripts; ledger and events are never deleted.
    "web": {
        **_COMMON,
        "auth_user": FULL,
        "auth_group": FULL,
        "auth_user_groups": FULL,
        "auth_group_permissions": FULL,
        "auth_user_user_permissions": FULL,
        "django_session": FULL,
        "django_admin_log": FULL,
        # Sign-in throttling (django-axes) records attempts and lockouts.
        "axes_accessattempt": FULL,
        "axes_accessattemptexpiration": FULL,
        "axes_accessfailurelog": FULL,
        "axes_accesslog": FULL,
        "runs_agent": WRITE,
        "runs_agentcredentialchange": APPEND,
        "runs_conversationagentchange": APPEND,
        "runs_conversation": FULL,
        "runs_run": FULL,
        "runs_transcriptentry": FULL,
        "schedules_schedule": FULL,
        "schedules_schedulerevision": ("SELECT", "INSERT", "DELETE"),
        "schedules_pauseevent": ("SELECT", "INSERT", "DELETE"),
        "schedules_occurrence": FULL,
        "schedules_apitoken": FULL,
        "schedules_notificationsettings": FULL,
        # The settings page's test button records its attempts; a deleted schedule takes its own.
        "schedules_notificationattempt": ("SELECT", "INSERT", "DELETE"),
        # The notices outbox: a decision made here, a run completed from here; a deleted schedule
        # takes its own.
        "schedules_notice": ("SELECT", "INSERT", "DELETE"),
        # Owners ask for limits and admins decide; a deleted schedule takes its requests along.
        "schedules_revisionrequest": FULL,
        "schedules_revisionrequestevent": ("SELECT", "INSERT", "DELETE"),
        # Chat proposals: confirmed or declined here (a row lock), deleted with their conversation.
        "schedules_proposal": FULL,
        # Budget alerts: judged at an interactive run's admission here, re-armed when an admin raises
        # a ceiling; a deleted user takes theirs.
        "accounting_budgetalert": ("SELECT", "INSERT", "UPDATE (rearmed_at)", "DELETE"),
        "accounting_ownerbudget": WRITE,
        "accounting_reservation": WRITE,
        "django_q_ormq": APPEND,
        "django_q_task": READ,
        "django_q_schedule": READ,
    },
    # The django-q2 cluster: materializes, admits, runs, accounts, reaps and notifies.
    "scheduler": {
        **_COMMON,
        "runs_conversation": WRITE,
        "runs_run": WRITE,
        "runs_transcriptentry": APPEND,
        "schedules_schedule": WRITE,
        # The schedule.create and schedule.update chat tools run inside the worker.
        "schedules_schedulerevision": APPEND,
        "schedules_pauseevent": APPEND,
        "schedules_occurrence": WRITE,
        "schedules_apitoken": READ,
        "schedules_notificationsettings": WRITE,
        "schedules_notificationattempt": APPEND,
        # The notices outbox: written with what it tells, marked claimed and sent by `notify`.
        "schedules_notice": (*APPEND, "UPDATE (notify_claimed_at, notified_at)"),
        "schedules_revisionrequest": READ,
        # The schedule.create chat tool proposes; the reaper records expiries.
        "schedules_proposal": WRITE,
        # Budget alerts judged at each admission and after each charge.
        "accounting_budgetalert": APPEND,
        "accounting_ownerbudget": WRITE,
        "accounting_reservation": WRITE,
        "django_q_ormq": FULL,
        "django_q_task": FULL,
        "django_q_schedule": FULL,
        "django_q_success": FULL,
        "django_q_failure": FULL,
    },
}


def grant_statements(role: str, kind: str, existing: set[str] | None = None) -> list[str]:
    """GRANT statements for `role` acting as `kind` ("web" or "scheduler")."""
    quoted = '"' + role.replace('"', '""') + '"'
    statements = [f"GRANT USAGE ON SCHEMA public TO {quoted};"]
    for table, privileges in sorted(ROLE_TABLES[kind].items()):
        if existing is not None and table not in existing:
            continue
        statements.append(f"GRANT {', '.join(privileges)} ON {table} TO {quoted};")
    statements.append(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {quoted};")
    return statements


def missing_lock_privileges(connection: BaseDatabaseWrapper) -> list[tuple[str, str]]:
    """(role, table) pairs where the connected role cannot lock rows it needs to lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, t.name, has_table_privilege(current_user, t.name, 'UPDATE') "
            "FROM unnest(%s::text[]) AS t(name) WHERE to_regclass(t.name) IS NOT NULL",
            [list(LOCKED_TABLES)],
        )
        return [(role, table) for role, table, allowed in cursor.fetchall() if not allowed]
