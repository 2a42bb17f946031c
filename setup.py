"""Build hook: compile the scheduling core's hot modules with mypyc (pure Python otherwise).

The core is strictly typed, so mypyc turns it into a C extension that runs the same code
about twice as fast. Everything still works as plain Python: set TRAINYARD_PURE=1 to skip
compilation (faster installs while developing), and a machine without a C compiler falls
back to pure Python as well. `tests/unit/core/test_compiled.py` checks that both decide alike.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

# Modules on the hot path of a cycle. framework.py and errors.py stay interpreted: they
# define exceptions deriving from built-in types, which mypyc does not compile.
COMPILED = [
    "src/trainyard/core/resources.py",
    "src/trainyard/core/topology.py",
    "src/trainyard/core/snapshot.py",
    "src/trainyard/core/types.py",
    "src/trainyard/core/queues.py",
    "src/trainyard/core/state.py",
    "src/trainyard/core/statement.py",
    "src/trainyard/core/placement.py",
    "src/trainyard/core/order.py",
    "src/trainyard/core/cycle.py",
    "src/trainyard/core/explain.py",
    "src/trainyard/core/explain_nodes.py",
    "src/trainyard/core/actions/allocate.py",
    "src/trainyard/core/actions/backfill.py",
    "src/trainyard/core/actions/gangplan.py",
    "src/trainyard/core/actions/protected.py",
    "src/trainyard/core/actions/victims.py",
    "src/trainyard/core/actions/reclaim.py",
    "src/trainyard/core/actions/preempt.py",
    "src/trainyard/core/actions/las_preempt.py",
    "src/trainyard/core/actions/moves.py",
    "src/trainyard/core/actions/donors.py",
    "src/trainyard/core/actions/growth_notes.py",
    "src/trainyard/core/actions/resize.py",
    "src/trainyard/core/actions/shrinkplan.py",
    "src/trainyard/core/goodput.py",
    "src/trainyard/core/plugins/scoring.py",
    "src/trainyard/core/plugins/job_orders.py",
]


def extensions() -> list[object]:
    if os.environ.get("TRAINYARD_PURE") == "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:  # no mypyc in the build environment: pure Python
        print("trainyard: mypyc not available, installing the pure-Python core", file=sys.stderr)
        return []
    return list(mypycify(COMPILED, opt_level="3"))


setup(ext_modules=extensions())
