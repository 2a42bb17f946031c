"""Loading a script of `bench/` as a module, for the tests of its helpers (the scripts are
not a package). Tests import it by name (`from bench_scripts import load`), as they do
`shared_data`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    """`bench/<name>.py`, imported afresh. `bench/` is put last on the import path, so that a
    script importing another (`from simulator import ...`) finds it as when run from there."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
