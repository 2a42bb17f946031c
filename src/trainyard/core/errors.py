"""Errors the core raises for input it cannot schedule.

Kept in a module of their own, interpreted rather than compiled: they derive from built-in
exception types, which mypyc does not compile (see setup.py).
"""

from __future__ import annotations

from trainyard.errors import FieldError


class SnapshotError(FieldError):
    """The snapshot is inconsistent. `field` says where, the message says what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.args = (f"{field}: {message}",)  # "field: message" even for an empty field
