"""`trainyard.textfile`: a user's file read as UTF-8 text, or one sentence saying why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.textfile import TextFileError, read_text, text_stream


def test_text_is_read_with_a_byte_order_mark_dropped(tmp_path: Path) -> None:
    file = tmp_path / "jobs.csv"
    file.write_bytes("\ufefftimestamp,num_gpus\r\n1,2\r\n".encode())
    assert read_text(file).startswith("timestamp,")
    assert list(text_stream(file)) == ["timestamp,num_gpus\r\n", "1,2\r\n"]


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.mkdir(), "is a directory; give a file"),
        (lambda p: None, "does not exist"),
        (lambda p: p.write_bytes(b"ok\n\xe9t\xe9\n"), "is not UTF-8 text (byte 3: 0xe9)"),
    ],
)
def test_what_is_not_text_is_said(tmp_path: Path, make: object, says: str) -> None:
    path = tmp_path / "input"
    make(path)  # type: ignore[operator]
    with pytest.raises(TextFileError) as caught:
        read_text(path)
    assert str(caught.value).startswith(says)
