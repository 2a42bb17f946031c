"""The one error type of the planner: a bad input, naming the field at fault and the fix.

Owned by the planner; every planner module raises `PlannerError` for input it cannot use, so a
CLI or config loader can point the user at the exact field.
"""

from __future__ import annotations

from trainyard.errors import FieldError, suggest

__all__ = ["PlannerError", "unknown_name"]


class PlannerError(FieldError):
    """A planner input is invalid.

    `field` names the offending field (for example ``"hidden"`` or ``"layout.tp"``);
    `message` says what is wrong and how to fix it.
    """


def unknown_name(field: str, kind: str, name: str, known: list[str]) -> PlannerError:
    """Build the error for a name missing from a registry, suggesting the closest known names."""
    close = suggest(name, known, n=3, cutoff=0.5, fold=True)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return PlannerError(field, f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}.")
