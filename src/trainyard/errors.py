"""The one error type for bad input, and the one "did you mean" helper.

Every layer that checks what a person wrote (a snapshot, a job spec, a scenario, a workload,
a planner request, an admin command) raises a subclass of `FieldError`: `field` says where the
value at fault is (a dotted path, an option name, ``file:line:column``; ``""`` for the input as
a whole) and `message` what is wrong and how to fix it; ``str(error)`` is ``"field: message"``.
Shells catch `FieldError` once and print that line (exit 2, HTTP 422), never a traceback.
`suggest` finds the known names closest to a misspelt one, for every such "did you mean".

The lowest layer of the package: it imports nothing of trainyard (the core may import it).
Interpreted, not compiled: its classes derive from built-in exception types (see setup.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["FieldError", "suggest"]


class FieldError(ValueError):
    """Bad input. `field` is where, `message` what to change; str is ``"field: message"``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling rebuilds an exception as cls(*args), which a subclass whose args are the
        # one "field: message" line cannot take: rebuild it from its args and attributes
        # instead, so an error raised in a worker process reaches its parent intact.
        return (_restore, (type(self), self.args, dict(self.__dict__)))


def _restore(
    cls: type[FieldError], args: tuple[object, ...], state: dict[str, object]
) -> FieldError:
    """A pickled `FieldError` (of any subclass) as it was: args and attributes."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def suggest(
    name: str, known: Iterable[str], *, n: int = 1, cutoff: float = 0.6, fold: bool = False
) -> list[str]:
    """The names of `known` closest to `name`, best first (at most `n`; `difflib`'s ratio
    >= `cutoff`). `fold` compares case-insensitively (and ``-`` as ``_``) and returns the
    known names as they are spelt."""
    names = list(known)
    if not fold:
        return difflib.get_close_matches(name, names, n=n, cutoff=cutoff)
    folded: dict[str, str] = {}
    for k in names:
        folded.setdefault(_fold(k), k)
    return [folded[c] for c in difflib.get_close_matches(_fold(name), list(folded), n, cutoff)]


def _fold(text: str) -> str:
    return text.lower().replace("-", "_")
