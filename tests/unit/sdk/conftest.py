"""Every SDK test starts from a plain process's environment: none of the launcher's or
trainyard's variables set (a test sets the ones it needs with `monkeypatch`)."""

from __future__ import annotations

import os

import pytest

PREFIXES = ("TRAINYARD_",)
NAMES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "MASTER_ADDR",
    "MASTER_PORT",
)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in NAMES or name.startswith(PREFIXES):
            monkeypatch.delenv(name)
