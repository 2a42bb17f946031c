"""`exec.logs.tail_lines` and `last_lines_start`: the last lines of a rank's log, read from the
end of its files (the rotated part too), against reading the whole log."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from trainyard.exec import logs


def _whole_tail(paths: dict[int, Path], count: int) -> list[str]:
    """What `tail_lines` must give: each rank's lines read whole, the last `count` kept."""
    out: list[str] = []
    for rank, path in sorted(paths.items()):
        lines = list(logs.read_lines({rank: path}, prefix=len(paths) > 1))
        out += lines[-count:] if count else []
    return out


@pytest.mark.parametrize("chunk", [1, 3, 64, logs.READ_CHUNK])
def test_tail_matches_the_end_of_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(logs, "READ_CHUNK", chunk)
    rng = random.Random(chunk)
    path = tmp_path / "rank-0.log"
    for _ in range(400):
        lines = ["x" * rng.choice([0, 1, 5, 40]) + str(i) for i in range(rng.randint(0, 9))]
        end = "\n" if lines and rng.random() < 0.7 else ""
        path.write_text("\n".join(lines) + end)
        older = [f"old {i}" for i in range(rng.randint(0, 5))]
        rotated = logs.rotated(path)
        if older:
            rotated.write_text("".join(f"{line}\n" for line in older))
        count = rng.randint(0, 12)
        assert list(logs.tail_lines({0: path}, False, count)) == _whole_tail({0: path}, count)
        rotated.unlink(missing_ok=True)


def test_tail_of_several_ranks_is_each_ranks_last_lines(tmp_path: Path) -> None:
    paths = {r: tmp_path / f"rank-{r}.log" for r in (0, 1)}
    paths[0].write_text("a\nb\nc\n")
    paths[1].write_text("only\n")
    assert list(logs.tail_lines(paths, True, 2)) == ["[rank 0] b", "[rank 0] c", "[rank 1] only"]
    assert list(logs.tail_lines({2: tmp_path / "missing.log"}, False, 5)) == []


def test_a_huge_line_is_read_only_as_far_back_as_the_tail_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "MAX_LINE", 8)
    path = tmp_path / "rank-0.log"
    path.write_text("start\n" + "y" * 1000 + "\n")
    start, found = logs.last_lines_start(path, 2)
    assert (start, found) == (path.stat().st_size - 16, 2)  # 2 pieces of at most 8 bytes
    got = list(logs.tail_lines({0: path}, False, 2))
    assert len(got) <= 2 and set("".join(got)) == {"y"}


def test_follow_with_a_tail_starts_with_the_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    path.write_text("".join(f"old {i}\n" for i in range(100)))
    done = threading.Event()
    lines = logs.follow_lines({0: path}, False, done.is_set, 0.01, tail_count=2)
    assert [next(lines), next(lines)] == ["old 98", "old 99"]
    with path.open("a") as f:
        f.write("new\n")
    assert next(lines) == "new"
    done.set()
    assert list(lines) == []
    nothing_old = logs.follow_lines({0: path}, False, lambda: True, tail_count=0)
    assert list(nothing_old) == []
