"""Every module of `trainyard` imports on its own terms: no runtime import cycle.

A cycle that works in one order (a module imported first by its package) and breaks in another
is hidden from the rest of the suite, which always imports in the same order. So each run
here starts a fresh interpreter and imports every module of the package in a different
random order (seeded, so a failure can be replayed), then checks the modules that should be
importable alone: the core and the job spec, which the server, simulator and CLI all build on.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import trainyard

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(trainyard.__path__, prefix="trainyard.")
    # alembic's scripts run inside alembic's migration context, not as imports
    if not m.name.startswith(
        ("trainyard.server.migrations.versions", "trainyard.server.migrations.env")
    )
)

SCRIPT = """
import importlib, random, sys
mods = sys.argv[2:]
random.Random(int(sys.argv[1])).shuffle(mods)
for name in mods:
    try:
        importlib.import_module(name)
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
        raise SystemExit(1)
"""


def _run(seed: int, modules: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(seed), *modules],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_package_has_its_modules() -> None:
    assert "trainyard.core.cycle" in MODULES and "trainyard.server.api.routes" in MODULES
    assert len(MODULES) > 100


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_module_imports_in_a_random_order(seed: int) -> None:
    result = _run(seed, MODULES)
    assert result.returncode == 0, f"seed {seed}: {result.stdout}{result.stderr[-2000:]}"


def test_core_and_jobspec_modules_import_alone() -> None:
    """The lower layers, one fresh interpreter each (the costly part is kept small)."""
    alone = [m for m in MODULES if m.startswith(("trainyard.core.", "trainyard.jobspec."))]
    failures = []
    for name in alone:
        result = _run(0, [name])
        if result.returncode != 0:
            failures.append(f"{result.stdout}{result.stderr[-500:]}")
    assert not failures, "\n".join(failures)
