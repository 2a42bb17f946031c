"""Job uids are unique on the machine, not only in one home (`exec/identity.py`): two servers
with homes of their own (a test server beside a real one) allocate from one registry under a
lock, so no two jobs share a uid, which would let them read each other's files and make one
server kill the other's processes as strays of its own job. A home's own counter is honoured
(uids given before the registry are not given again); a registry that cannot be used keeps
`--job-user dynamic` from starting, with the fix in the message."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from trainyard.exec.identity import DEFAULT_UID_BASE, IdentityError, JobUsers


@pytest.fixture(autouse=True)
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "machine" / "next-uid"
    monkeypatch.setenv("TRAINYARD_UID_REGISTRY", str(path))
    return path


def _uid(runs: Path, job: str) -> int:
    job_dir = runs / "jobs" / job
    job_dir.mkdir(parents=True, exist_ok=True)
    uid = JobUsers("dynamic").for_job(job_dir).uid
    assert uid is not None
    return uid


def test_two_homes_never_give_the_same_uid(tmp_path: Path, registry: Path) -> None:
    first, second = tmp_path / "home-a" / "runs", tmp_path / "home-b" / "runs"
    uids = [_uid(first, "a1"), _uid(second, "b1"), _uid(first, "a2"), _uid(second, "b2")]
    assert len(set(uids)) == 4
    assert uids[0] == DEFAULT_UID_BASE + 1
    assert _uid(first, "a1") == uids[0]  # a job keeps its uid for every attempt
    assert registry.read_text().strip() == str(max(uids) + 1)
    assert oct(registry.parent.stat().st_mode & 0o777) == "0o700"


def test_a_home_that_allocated_before_the_registry_is_not_given_its_uids_again(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "old-home" / "runs"
    runs.mkdir(parents=True)
    (runs / "next-uid").write_text("42\n")  # 41 uids given by the per-home counter
    assert _uid(runs, "new") == DEFAULT_UID_BASE + 42
    assert _uid(tmp_path / "other" / "runs", "x") == DEFAULT_UID_BASE + 43


def _allocate(args: tuple[str, str, int]) -> list[int]:
    registry, runs, count = args
    os.environ["TRAINYARD_UID_REGISTRY"] = registry
    return [_uid(Path(runs), f"{Path(runs).parent.name}-{i}") for i in range(count)]


def test_servers_allocating_at_once_get_distinct_uids(tmp_path: Path, registry: Path) -> None:
    work = [(str(registry), str(tmp_path / f"home-{n}" / "runs"), 25) for n in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        uids = [uid for got in pool.map(_allocate, work) for uid in got]
    assert len(uids) == 100 and len(set(uids)) == 100


def test_an_unusable_registry_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TRAINYARD_UID_REGISTRY", str(blocker / "next-uid"))  # under a file
    runs = tmp_path / "runs"
    ours = (tmp_path, *tmp_path.parents)  # pytest's 0700 folders: not what is tested
    with pytest.raises(IdentityError) as err:
        JobUsers.create("dynamic", runs, euid=0, ours=ours)
    assert "TRAINYARD_UID_REGISTRY" in str(err.value) and str(blocker) in str(err.value)
    users = JobUsers.create("auto", runs, euid=0, ours=ours)
    assert users.mode == "server" and users.note.startswith("WARNING: jobs run as root")
