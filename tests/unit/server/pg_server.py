"""A throwaway PostgreSQL server for the database tests (initdb + pg_ctl, no service needed).

The server lives in a fresh directory under /tmp, listens on 127.0.0.1 on a free port and on
a Unix socket in that directory, with fsync off (test data is disposable), and is removed
when stopped. TCP connections need the password (scram-sha-256), as a real deployment's would:
the isolation tests check that a job on this machine cannot reach the database without it.
PostgreSQL refuses to run as root, so as root the commands run as the
`postgres` OS user (which Debian's `postgresql` package creates) through `runuser`/`su`,
and the directory is handed to that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = (
    "install PostgreSQL with `apt-get install -y postgresql` (Debian/Ubuntu), "
    "or point TRAINYARD_PG_BIN at the directory holding initdb and pg_ctl"
)


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why."""


def required() -> bool:
    """True when a missing PostgreSQL must fail the tests rather than skip them."""
    wanted = {p.strip().lower() for p in os.environ.get("TRAINYARD_REQUIRE", "").split(",")}
    return "postgres" in wanted or os.environ.get("CI", "").strip().lower() == "true"


def find_bindir() -> Path | None:
    """The directory with initdb and pg_ctl: $TRAINYARD_PG_BIN, PATH, or Debian's layout."""
    candidates: list[Path] = []
    if os.environ.get("TRAINYARD_PG_BIN"):  # given: that directory and no other
        given = Path(os.environ["TRAINYARD_PG_BIN"])
        return given if (given / "initdb").is_file() and (given / "pg_ctl").is_file() else None
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(Path(found).resolve().parent)

    def version(p: Path) -> int:
        match = re.search(r"/(\d+)/bin$", str(p))
        return int(match.group(1)) if match else 0

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One running server; `url(database)` gives a SQLAlchemy URL for a database on it."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.run_as: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable(
                    "running as root, and initdb refuses root: no `postgres` OS user to run "
                    "it as (the Debian package creates one)"
                ) from None
            self.run_as = "postgres"
        base = "/tmp" if self.run_as else None  # root's TMPDIR may be closed to postgres
        self.root = Path(tempfile.mkdtemp(prefix="trainyard-pg-", dir=base))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self.password = secrets.token_hex(16)
        if self.run_as:
            shutil.chown(self.root, user=self.run_as)

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as is None:
            return list(args)
        if shutil.which("runuser"):
            return ["runuser", "-u", self.run_as, "--", *args]
        return ["su", self.run_as, "-s", "/bin/sh", "-c", shlex.join(args)]

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(
            self._cmd(*args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise PostgresUnavailable(
                f"`{shlex.join(args)}` failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}\n{log}"
            )

    def start(self) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.run_as:
            shutil.chown(pwfile, user=self.run_as)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "--auth-local=trust",
            "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-U", "postgres",
            "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        pwfile.unlink()
        last: PostgresUnavailable | None = None
        for _ in range(3):  # a free port can be taken between choosing and binding it
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off"
            )
            try:
                self._run(
                    str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                    "-w", "-t", "60", "-o", options, "start",
                )  # fmt: skip
                return
            except PostgresUnavailable as error:
                last = error
        assert last is not None
        raise last

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if (self.data / "postmaster.pid").exists():
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                          "stop")  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres:{self.password}@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        """A libpq connection string (psycopg) for `database`."""
        return (
            f"host=127.0.0.1 port={self.port} user=postgres password={self.password} "
            f"dbname={database}"
        )
