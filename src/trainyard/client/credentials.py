"""Where the CLI keeps its login: the server URL and the API token.

The file is `$TRAINYARD_CONFIG`, else `$XDG_CONFIG_HOME/trainyard/credentials.json`, else
`~/.config/trainyard/credentials.json`; it holds `{"url": ..., "token": ...}` and is written
atomically, readable by its owner only (mode 0600, its directory 0700 when created).
`trainyard login` and `trainyard up` (after bootstrapping a local server) call `save`;
every command that talks to a server reads it with `load`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Credentials", "clear", "credentials_path", "load", "problem", "save"]


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str


def credentials_path() -> Path:
    """`$TRAINYARD_CONFIG`, else `$XDG_CONFIG_HOME/trainyard/credentials.json`, else
    `~/.config/trainyard/credentials.json`."""
    explicit = os.environ.get("TRAINYARD_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "trainyard" / "credentials.json"


def save(url: str, token: str, path: Path | None = None) -> Path:
    """Store `url` and `token` (atomically, mode 0600); returns the file written."""
    target = path if path is not None else credentials_path()
    if not target.parent.exists():
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"url": url, "token": token}, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)  # in case the file existed with another mode
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _read(path: Path) -> Credentials | str:
    """The credentials in `path`, or why they cannot be used."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "missing"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({exc})"
    except ValueError:
        return "is not valid JSON"
    if not isinstance(data, dict):
        return 'is not a JSON object {"url": ..., "token": ...}'
    url, token = data.get("url"), data.get("token")
    if not isinstance(url, str) or not url or not isinstance(token, str) or not token:
        return 'lacks "url" or "token" (strings)'
    return Credentials(url=url, token=token)


def load(path: Path | None = None) -> Credentials | None:
    """The stored login, or None when there is none or the file is unusable (`problem` says
    why, for an error message)."""
    found = _read(path if path is not None else credentials_path())
    return found if isinstance(found, Credentials) else None


def problem(path: Path | None = None) -> str | None:
    """Why the credentials file exists but cannot be used (None: fine or absent)."""
    found = _read(path if path is not None else credentials_path())
    return None if isinstance(found, Credentials) or found == "missing" else found


def clear(path: Path | None = None) -> bool:
    """Forget the stored login; True when there was a file to remove."""
    target = path if path is not None else credentials_path()
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    return True
