"""The core stays pure and small: no I/O, clock, randomness or outer-layer imports (checked
on the source with `ast`, and on a real import in a fresh interpreter), honest `__all__`
lists, and a docstring and fewer than 500 lines in every file."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainyard.core

SRC = Path(__file__).resolve().parents[3] / "src"
CORE = SRC / "trainyard" / "core"
CORE_FILES = sorted(CORE.rglob("*.py"))

FORBIDDEN_TOP = {
    "sqlalchemy",
    "fastapi",
    "httpx",
    "ray",
    "requests",
    "subprocess",
    "socket",
    "time",
    "datetime",
    "random",
    "os",
}
FORBIDDEN_CALLS = {"open", "print", "input", "eval", "exec", "__import__", "breakpoint"}
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[str]:
    """Absolute names of every module that `source` (module `module`) imports, relative
    imports resolved; for `from m import x` both `m` and `m.x`, since x may be a module."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append(name)
            out.extend(f"{name}.{alias.name}" for alias in node.names)
    return out


def imported_modules(path: Path) -> list[str]:
    return imports_of(path.read_text(), module_name(path), path.name == "__init__.py")


def forbidden(module: str) -> bool:
    top = module.split(".")[0]
    if top in FORBIDDEN_TOP:
        return True
    # nothing of trainyard outside the core (server, exec, sim, cli, sdk, ...) but the
    # package's lowest layer, its one input-error type (`trainyard.errors`)
    if module in ("trainyard", "trainyard.errors") or module.startswith("trainyard.errors."):
        return False
    return top == "trainyard" and not module.startswith("trainyard.core")


def test_the_core_files_are_found() -> None:
    names = {p.relative_to(CORE).as_posix() for p in CORE_FILES}
    assert {"__init__.py", "cycle.py", "state.py", "actions/victims.py"} <= names


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_source_imports_nothing_impure(path: Path) -> None:
    bad = sorted({m for m in imported_modules(path) if forbidden(m)})
    assert not bad, f"{path.relative_to(SRC)} imports {bad}"


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_source_does_no_io_and_no_dynamic_imports(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            calls.append(f"{func.id}() at line {node.lineno}")
        if isinstance(func, ast.Attribute) and func.attr == "import_module":
            calls.append(f"import_module() at line {node.lineno}")
    assert not calls, f"{path.relative_to(SRC)} calls {calls}"


def test_the_checker_sees_forbidden_imports() -> None:
    """The ast check itself: plain, dotted, `from` and relative imports are all seen."""
    assert forbidden("os") and forbidden("os.path") and forbidden("time")
    assert forbidden("trainyard.cli.main") and forbidden("trainyard.server")
    assert forbidden("trainyard.sim") and forbidden("trainyard.exec") and forbidden("trainyard.sdk")
    assert not forbidden("trainyard.core.types") and not forbidden("dataclasses")
    assert not forbidden("trainyard")
    source = "import os.path\nfrom datetime import datetime\nfrom ...cli import main\n"
    names = imports_of(source, "trainyard.core.actions.fake", is_package=False)
    assert {"os.path", "datetime", "trainyard.cli", "trainyard.cli.main"} <= set(names)
    assert all(map(forbidden, ["os.path", "datetime", "trainyard.cli"]))
    names = imports_of("from .. import types\n", "trainyard.core.actions", is_package=True)
    assert names == ["trainyard.core", "trainyard.core.types"]


# framework.py is the core's lowest layer (plugin protocols, registries, `Profile`): every
# other core module may build on it, so it may build on nothing of the core but `types`.
FRAMEWORK_MAY_IMPORT = {"trainyard.core.types", "trainyard.errors"}


def framework_violations(source: str) -> list[str]:
    """The imports of `source` (as framework.py) that are neither the standard library nor
    `FRAMEWORK_MAY_IMPORT`; under `if TYPE_CHECKING:` too (ast sees every import)."""
    bad = []
    for name in imports_of(source, "trainyard.core.framework", is_package=False):
        if name.split(".")[0] in sys.stdlib_module_names:
            continue
        if any(name == m or name.startswith(m + ".") for m in FRAMEWORK_MAY_IMPORT):
            continue
        bad.append(name)
    return sorted(set(bad))


def test_framework_is_the_lowest_layer_of_the_core() -> None:
    bad = framework_violations((CORE / "framework.py").read_text())
    assert not bad, f"core/framework.py imports {bad}: it must stay the core's lowest layer"


def test_the_layer_check_sees_imports_above_framework() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from trainyard.core.types import Job\n"
        "from trainyard.errors import suggest\n"
        "from . import state\n"
        "if TYPE_CHECKING:\n"
        "    from trainyard.core.cycle import Cycle\n"
        "import numpy\n"
    )
    assert framework_violations(source) == [
        "numpy",
        "trainyard.core",
        "trainyard.core.cycle",
        "trainyard.core.cycle.Cycle",
        "trainyard.core.state",
    ]


IMPORT_PROBE = """
import json, sys
before = set(sys.modules)
import trainyard.core
import trainyard.core.actions, trainyard.core.plugins
print(json.dumps({"file": trainyard.core.__file__, "new": sorted(set(sys.modules) - before)}))
"""


def _fresh_import(env: dict[str, str]) -> tuple[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["file"], result["new"]


@pytest.mark.parametrize("where", ["installed", "working tree"])
def test_importing_the_core_loads_nothing_impure(where: str) -> None:
    """`os` is loaded by every interpreter at start-up, so only the ast check above can
    catch it; everything else that importing the core newly loads is checked here, both for
    the copy the environment imports and for the working tree under src/."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if where == "working tree":
        env["PYTHONPATH"] = str(SRC)
    file, new = _fresh_import(env)
    if where == "working tree":
        assert Path(file).resolve().is_relative_to(SRC)
    bad = [m for m in new if forbidden(m)]
    assert not bad, f"importing trainyard.core ({file}) loads {bad}"


def public_modules() -> list[str]:
    names = ["trainyard.core"]
    for info in pkgutil.walk_packages(trainyard.core.__path__, "trainyard.core."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(set(names))


def test_public_modules_are_found() -> None:
    names = public_modules()
    assert {"trainyard.core", "trainyard.core.cycle", "trainyard.core.actions.preempt"} <= set(
        names
    )


@pytest.mark.parametrize("name", public_modules())
def test_all_lists_only_existing_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        return
    assert all(isinstance(n, str) for n in exported)
    assert len(set(exported)) == len(exported), f"{name}.__all__ has duplicates"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists missing names {missing}"


def test_star_import_of_the_core_works() -> None:
    namespace: dict[str, object] = {}
    exec("from trainyard.core import *", namespace)
    assert set(trainyard.core.__all__) <= set(namespace)


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_every_core_file_has_a_docstring_and_stays_small(path: Path) -> None:
    text = path.read_text()
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring and docstring.strip(), f"{path.relative_to(SRC)} has no module docstring"
    lines = len(text.splitlines())
    assert lines < MAX_LINES, f"{path.relative_to(SRC)} has {lines} lines (limit {MAX_LINES})"
