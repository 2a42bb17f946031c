"""Who a job's processes run as, and whether that account can reach what the job needs.

Policies (`trainyard up --job-user`, `JobUsers.create`):

- `auto` (the default): `dynamic` when the server runs as root and an unprivileged account
  can reach the interpreter and the state directory; else `server`, with a note saying why
  (printed by `trainyard up` and recorded on every job's STARTING event).
- `dynamic`: every job runs as a uid of its own, allocated once per job from `uid_base` up and
  never reused (no /etc/passwd entry is needed, as with systemd's DynamicUser). The uid is
  kept in `<job dir>/uid`, so every attempt of a job runs as the same uid and owns its
  checkpoints. A job therefore cannot read another job's files or `/proc/<pid>/environ`, nor
  signal its processes, nor read the server's state (files 0600, directories 0700/0711,
  owned by root). Needs root.
- `server`: jobs run as the server's own user. Nothing then separates a job from the server's
  files (the database, the admin token) beyond the clean environment: use it for one
  person's machine only.
- any other value names an account (`/etc/passwd`); every job runs as it. Jobs are apart
  from the server, but not from each other.

Uids are allocated machine-wide: the next one is kept in `UID_REGISTRY`
(`/var/lib/trainyard/next-uid`, or `$TRAINYARD_UID_REGISTRY`), under an exclusive `flock`,
so that two servers on one machine (two homes, a test server beside a real one) never give
the same uid to two jobs: that would let their jobs read each other's files and signal each
other's processes, and a server would kill the other's processes as strays of its own job.
`<runs>/next-uid` keeps the home's own count too; the larger of the two is used, so uids
given before the registry existed are not given again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_UID_BASE = 2_000_000_000  # far above any account a system or directory creates
UID_REGISTRY = Path("/var/lib/trainyard/next-uid")  # machine-wide (module docstring)
UID_SPAN = 2**31  # uids stay below 2**32 - 1 ("no user")


class IdentityError(ValueError):
    """A job-user setting that cannot work here (the message says why and what to do)."""


@dataclass(frozen=True)
class Identity:
    """The account one job runs as; `uid is None`: the server's own user."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""

    @property
    def separate(self) -> bool:
        return self.uid is not None


@dataclass(frozen=True)
class JobUsers:
    """The policy in force (see the module docstring) and why it was chosen."""

    mode: str  # "dynamic", "server" or "named"
    account: str = ""
    uid_base: int = DEFAULT_UID_BASE
    note: str = ""

    @classmethod
    def create(
        cls,
        setting: str,
        runs_dir: Path,
        *,
        uid_base: int = DEFAULT_UID_BASE,
        euid: int | None = None,
        ours: tuple[Path, ...] = (),
    ) -> JobUsers:
        """Resolve `setting` (auto | dynamic | server | an account name) for this process;
        `ours` are directories the server itself opens to jobs (its home), not checked."""
        root = (os.geteuid() if euid is None else euid) == 0
        if not 0 < uid_base < 2**32 - UID_SPAN:
            raise IdentityError(f"job uid base: {uid_base} must be in 1..{2**32 - UID_SPAN - 1}")
        needed = [Path(sys.executable), runs_dir]
        if setting in ("auto", "dynamic"):
            if not root:
                if setting == "dynamic":
                    raise IdentityError(
                        "--job-user dynamic needs root (to run jobs as other uids); run the "
                        "server as root or use --job-user server"
                    )
                return cls("server", note="jobs run as the server's user (it is not root)")
            blocked = first_unreachable(needed, uid_base, uid_base, (), ours)
            registry = _registry_problem()
            if blocked is None and registry:
                if setting == "dynamic":
                    raise IdentityError(f"--job-user dynamic: {registry}")
                return cls("server", note=f"WARNING: jobs run as root, not isolated: {registry}")
            if blocked is None:
                return cls("dynamic", uid_base=uid_base)
            why = (
                f"a job's uid cannot reach {blocked[0]} ({blocked[1]} is mode "
                f"{stat.filemode(blocked[2])}): grant traverse (`chmod o+x {blocked[1]}`), "
                "or keep the interpreter and TRAINYARD_HOME outside it"
            )
            if setting == "dynamic":
                raise IdentityError(f"--job-user dynamic: {why}")
            return cls("server", note=f"WARNING: jobs run as root, not isolated: {why}")
        if setting == "server":
            note = "jobs run as root (--job-user server): not isolated" if root else ""
            return cls("server", note=note)
        try:
            entry = pwd.getpwnam(setting)
        except KeyError:
            raise IdentityError(
                f"--job-user {setting!r}: no such account; create it, or use auto, dynamic or "
                "server"
            ) from None
        if not root and entry.pw_uid != os.geteuid():
            raise IdentityError(f"--job-user {setting!r}: running jobs as it needs root")
        groups = tuple(os.getgrouplist(setting, entry.pw_gid))
        blocked = first_unreachable(needed, entry.pw_uid, entry.pw_gid, groups, ours)
        if blocked is not None:
            raise IdentityError(
                f"--job-user {setting!r} cannot reach {blocked[0]} ({blocked[1]} is mode "
                f"{stat.filemode(blocked[2])})"
            )
        return cls("named", account=setting)

    def for_job(self, job_dir: Path) -> Identity:
        """The identity of the job whose directory is `job_dir` (allocated on first use)."""
        if self.mode == "server":
            return Identity()
        if self.mode == "named":
            entry = pwd.getpwnam(self.account)
            return Identity(entry.pw_uid, entry.pw_gid, self.account)
        record = job_dir / "uid"
        try:
            uid = int(record.read_text().strip())
        except (FileNotFoundError, ValueError):
            uid = self._next_uid(job_dir.parent.parent)
            write_private(record, f"{uid}\n")
        return Identity(uid, uid, f"trainyard-{uid}")

    def _next_uid(self, runs_dir: Path) -> int:
        """A uid no job of any server on this machine was given (module docstring)."""
        counter, registry = runs_dir / "next-uid", uid_registry()
        with machine_lock(registry):
            offset = max(1, _number(counter), _number(registry) - self.uid_base)
            write_private(registry, f"{self.uid_base + offset + 1}\n")
            write_private(counter, f"{offset + 1}\n")
        return self.uid_base + offset % UID_SPAN


def _registry_problem() -> str:
    """Why this machine's uid registry cannot be used, or "" (it can)."""
    registry = uid_registry()
    try:
        with machine_lock(registry):
            pass
    except OSError as exc:
        return (
            f"the machine's job-uid registry {registry} cannot be used ({exc.strerror or exc}); "
            "make its folder writable by root, or set TRAINYARD_UID_REGISTRY to a file on a "
            "local disk that every trainyard server on this machine uses"
        )
    return ""


def uid_registry() -> Path:
    """Where this machine's next job uid is kept (module docstring)."""
    return Path(os.environ.get("TRAINYARD_UID_REGISTRY") or UID_REGISTRY)


@contextlib.contextmanager
def machine_lock(registry: Path) -> Iterator[None]:
    """An exclusive lock on `registry`'s lock file, made with its folder (root's, 0700)."""
    registry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(registry.with_name(f"{registry.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _number(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` (mode 0600), atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def first_unreachable(
    paths: list[Path],
    uid: int,
    gid: int,
    groups: tuple[int, ...],
    ours: tuple[Path, ...] = (),
) -> tuple[Path, Path, int] | None:
    """The first of `paths` (wanted, blocking directory, its mode) that `uid` cannot reach:
    every directory above it (and through its symlinks) must grant that account search,
    except `ours`."""
    skip = {Path(os.path.abspath(p)) for p in ours} | {Path(p).resolve() for p in ours}
    for wanted in paths:
        for target in (Path(os.path.abspath(wanted)), Path(wanted).resolve()):
            for parent in reversed(target.parents):
                if parent in skip:
                    continue
                try:
                    st = parent.stat()
                except OSError:
                    continue  # not created yet: it will be, by the server
                if not _grants(st, uid, gid, groups, 0o1):
                    return wanted, parent, st.st_mode
    return None


def _grants(st: os.stat_result, uid: int, gid: int, groups: tuple[int, ...], bits: int) -> bool:
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & (bits << 6))
    if st.st_gid == gid or st.st_gid in groups:
        return bool(st.st_mode & (bits << 3))
    return bool(st.st_mode & bits)
