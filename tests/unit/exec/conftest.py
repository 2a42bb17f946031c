"""The executor fixture shared by the executor tests: a `LocalExecutor` on a fresh root whose
runs are stopped after the test, whatever it left running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from trainyard.exec.local import LocalExecutor


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[LocalExecutor]:
    ex = LocalExecutor(tmp_path / "root", api_url="http://127.0.0.1:8080", grace_s=1.0)
    yield ex
    for h in ex.handles():
        ex.stop(h, grace_s=0.5)
