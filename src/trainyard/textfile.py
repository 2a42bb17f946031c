"""Reading a file a user names: UTF-8 text, or one sentence saying why not.

Every reader of a user's file (a model or GPU catalogue for the planner, a job spec, a
scenario or cluster, a trace or profile for the simulator) goes through `read_text`, so a
directory, an unreadable file or a binary one is said plainly, naming the file, instead of
raising `UnicodeDecodeError` or `IsADirectoryError` from deep inside a parser. A UTF-8
byte-order mark (what spreadsheet programs write first) is dropped.
"""

from __future__ import annotations

import io
from os import PathLike
from pathlib import Path

__all__ = ["TextFileError", "read_text", "text_stream"]


class TextFileError(ValueError):
    """The file cannot be read as text; the message says why (not naming the file: the
    caller's error does)."""


def read_text(path: str | PathLike[str]) -> str:
    """The text of `path`, decoded as UTF-8 (a leading byte-order mark dropped)."""
    file = Path(path)
    try:
        data = file.read_bytes()
    except IsADirectoryError:
        raise TextFileError("is a directory; give a file") from None
    except FileNotFoundError:
        raise TextFileError("does not exist") from None
    except OSError as exc:
        raise TextFileError(f"cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TextFileError(
            f"is not UTF-8 text (byte {exc.start}: 0x{data[exc.start]:02x}); save it as UTF-8 text"
        ) from None


def text_stream(path: str | PathLike[str]) -> io.StringIO:
    """`read_text(path)` as a stream for `csv.reader` (newlines kept as the file has them)."""
    return io.StringIO(read_text(path), newline="")
