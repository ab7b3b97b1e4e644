from __future__ import annotations

import os

from django.apps import AppConfig

_inherited: list[object] = []


def forget_inherited_connections() -> None:
    """In a forked child (django-q2's workers): drop, without closing, the connection pool and
    connections the parent had opened. Their sockets belong to the parent, and the pool's
    threads did not survive the fork; the child opens its own on first use."""
    from django.db import connections
    from django.db.backends.postgresql.base import DatabaseWrapper

    # Kept referenced, never collected: a pool's finalizer takes locks a parent's thread may
    # have held at the fork, and would wait for them for ever.
    _inherited.extend(DatabaseWrapper._connection_pools.values())  # type: ignore[attr-defined]
    DatabaseWrapper._connection_pools.clear()  # type: ignore[attr-defined]
    for conn in connections.all(initialized_only=True):
        conn.connection = None


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from runs.inflight import forget_inherited_flights
        from runs.providers.gate import forget_inherited_gates
        from runs.services import forget_inherited_heart
        from runs.tasks import connect_worker_receivers
        from runs.tools.builtin import register_builtin_tools

        register_builtin_tools()
        connect_worker_receivers()
        os.register_at_fork(after_in_child=forget_inherited_connections)
        os.register_at_fork(after_in_child=forget_inherited_gates)
        os.register_at_fork(after_in_child=forget_inherited_flights)
        os.register_at_fork(after_in_child=forget_inherited_heart)
