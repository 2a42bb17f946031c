"""`exec/ray/fence.py` without a cluster: which earlier attempts make a new one wait for the
fence to be read, and the supervisors' watch, which kills its rank only when a later
attempt is named (an unreadable or missing fence, or its own attempt, kills nothing)."""

from __future__ import annotations

import threading
from pathlib import Path

from trainyard.exec.ray import fence
from trainyard.exec.ray.runs import RayRun
from trainyard.exec.run import RankInfo, RunHandle


def _run(attempt: int, codes: dict[int, int | None], killed: tuple[int, ...] = ()) -> RayRun:
    ranks = tuple(RankInfo(r, 0, None, Path("/dev/null"), (r,), "w1") for r in range(2))
    run = RayRun(RunHandle("j", attempt, 0, 0, Path("/nonexistent"), ranks))
    run.codes.update(codes)
    run.killed.update(killed)
    for r in set(range(2)) - set(codes):
        run.lost[r] = "its supervisor on node w1 died"
    return run


def test_only_ranks_that_may_live_out_of_reach_make_the_next_attempt_wait() -> None:
    exited = _run(0, {0: -9, 1: -15})  # a killed rank, the other stopped: both seen to end
    killed_here = _run(1, {0: 1}, killed=(1,))  # an actor the executor itself killed
    lost = _run(2, {0: -15})  # rank 1 lost with its node: it may still run
    assert not fence.unsure([], {})
    assert not fence.unsure([0], {0: exited})
    assert not fence.unsure([0, 1], {0: exited, 1: killed_here})
    assert fence.unsure([0, 1, 2], {0: exited, 1: killed_here, 2: lost})
    assert fence.unsure([0], {})  # an attempt never seen here (an earlier server's)


def _watch(path: Path, attempt: int, writes: list[object]) -> list[int]:
    """Run `watch` while `writes` are put in the fence one period apart; what it killed."""
    killed: list[int] = []
    done = threading.Event()
    thread = threading.Thread(
        target=fence.watch, args=(str(path), attempt, done.wait, killed.append)
    )
    thread.start()
    for value in writes:
        if isinstance(value, int):
            fence.write(path.parent, value)
        else:
            path.write_text(str(value))
        done.wait(2 * fence.PERIOD_S)
    done.set()
    thread.join(5)
    assert not thread.is_alive()
    return killed


def test_the_watch_kills_its_rank_only_for_a_later_attempt(tmp_path: Path) -> None:
    path = fence.fence_file(tmp_path)
    assert _watch(path, 3, []) == []  # no fence yet
    assert _watch(path, 3, ["{not json", 3]) == []  # unreadable, then its own attempt
    assert _watch(path, 3, [3, 4]) == [4]
    assert fence.current(path) == 4
