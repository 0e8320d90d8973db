"""State: the ``StateStore`` protocol and its two stores (SQL: SQLite by default, PostgreSQL by
URL, with migrations; memory, for tests), the event log, the in-memory mirror of active
jobs and nodes, and the plan applier.

Every state change is written together with an event row in one transaction. Imports
``hal.core``, ``hal.config`` and the scheduler's snapshot/plan types; never ``hal.api``.
"""
