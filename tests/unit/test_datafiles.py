"""`trainyard.datafiles`: the shared data folder and how a data path is found in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.datafiles import (
    DataFileNotFoundError,
    data_file_candidates,
    find_data_file,
    locate_data_file,
    shared_root,
)


def test_shared_root_is_the_variable_else_beside_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_SHARED", str(tmp_path / "data"))
    assert shared_root() == tmp_path / "data"
    for unset in (True, False):
        if unset:
            monkeypatch.delenv("TRAINYARD_SHARED")
        else:
            monkeypatch.setenv("TRAINYARD_SHARED", "")  # empty counts as unset
        monkeypatch.chdir(tmp_path)
        assert shared_root() == tmp_path.parent / "shared"


def test_the_path_as_given_comes_first_then_the_shared_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    (shared / "traces" / "t").mkdir(parents=True)
    (shared / "traces" / "t" / "a.csv").write_text("x\n")
    monkeypatch.chdir(tmp_path)
    assert data_file_candidates("t/a.csv", shared, ("", "traces")) == [
        Path("t/a.csv"),
        shared / "t" / "a.csv",
        shared / "traces" / "t" / "a.csv",
    ]
    assert find_data_file("t/a.csv", shared, ("", "traces")) == shared / "traces" / "t" / "a.csv"
    assert find_data_file("t/a.csv", shared) is None  # only shared/ itself by default
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.csv").write_text("x\n")
    assert locate_data_file("t/a.csv", shared, ("", "traces")) == Path("t/a.csv")
    # an absolute path is never looked up under shared; no shared folder: only as given
    assert data_file_candidates(tmp_path / "b.csv", shared) == [tmp_path / "b.csv"]
    assert data_file_candidates("b.csv", None) == [Path("b.csv")]


def test_a_missing_file_names_every_place_tried(tmp_path: Path) -> None:
    with pytest.raises(DataFileNotFoundError) as info:
        locate_data_file("none.csv", tmp_path / "shared")
    assert info.value.tried == (Path("none.csv"), tmp_path / "shared" / "none.csv")
    assert str(info.value) == f"none.csv not found (tried none.csv, {tmp_path}/shared/none.csv)"
    assert isinstance(info.value, FileNotFoundError)
