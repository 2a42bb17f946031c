"""A job's environment (exec/jobenv.py): built from an allow-list, never the server's own, and
`--job-env` refusing names that would hand every job the platform's credentials."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainyard.exec.jobenv import check_passthrough, job_environment

SERVER = {
    "PATH": "/opt/server/bin:/usr/bin",
    "TRAINYARD_DB": "postgresql://trainyard:secret@db/trainyard",
    "RAY_AUTH_TOKEN": "0123456789abcdef0123456789abcdef",
    "AWS_SECRET_ACCESS_KEY": "hush",
    "HF_HOME": "/data/hf",
    "NCCL_SOCKET_IFNAME": "ib0",
}


def _env(passthrough: tuple[str, ...] = (), **spec: str) -> dict[str, str]:
    return job_environment(
        spec_env=spec, own={"TRAINYARD_TOKEN": "tyj_job", "RANK": "0"}, home=Path("/j/home"),
        tmp=Path("/j/tmp"), user="ty-1001", passthrough=passthrough, server_env=SERVER,
    )  # fmt: skip


def test_a_job_sees_only_the_allow_list_and_the_names_passed_through() -> None:
    env = _env(("HF_HOME", "NCCL_SOCKET_IFNAME", "NOT_SET_ON_THE_SERVER"), WANDB_MODE="offline")
    assert env == {
        "HOME": "/j/home", "TMPDIR": "/j/tmp", "USER": "ty-1001", "LOGNAME": "ty-1001",
        "LANG": "C.UTF-8", "HF_HOME": "/data/hf", "NCCL_SOCKET_IFNAME": "ib0",
        "WANDB_MODE": "offline",
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "TRAINYARD_TOKEN": "tyj_job", "RANK": "0",
    }  # fmt: skip


def test_a_spec_cannot_override_the_executors_own_variables() -> None:
    env = _env(TRAINYARD_TOKEN="forged", RANK="7", PATH="/mine/bin")
    assert env["TRAINYARD_TOKEN"] == "tyj_job" and env["RANK"] == "0"
    assert env["PATH"] == f"{Path(sys.executable).parent}:/mine/bin"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("RAY_AUTH_TOKEN", "the Ray cluster's token"),
        ("RAY_AUTH_TOKEN_PATH", "Ray cluster's token is kept"),
        ("TRAINYARD_DB", "database URL"),
        ("TRAINYARD_HOME", "the platform's own"),
        ("TRAINYARD_JOB_ID", "which the executor sets"),
        ("", "not a variable name"),
        ("HF HOME", "not a variable name"),
        ("1ST", "not a variable name"),
        ("A=B", "not a variable name"),
    ],
)
def test_job_env_refuses_the_platforms_credentials_and_non_names(name: str, why: str) -> None:
    with pytest.raises(ValueError, match="--job-env") as error:
        check_passthrough(["HF_HOME", name])
    assert why in str(error.value)


def test_job_env_passes_ordinary_names() -> None:
    check_passthrough(["HF_HOME", "NCCL_SOCKET_IFNAME", "_X1", "RAY_DEDUP_LOGS"])


def test_up_refuses_job_env_ray_auth_token_before_starting(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trainyard.cli.main import app

    out = CliRunner().invoke(
        app, ["up", "--home", str(tmp_path / "home"), "--job-env", "RAY_AUTH_TOKEN"]
    )
    assert out.exit_code == 2, out.output
    assert "--job-env RAY_AUTH_TOKEN" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "home").exists()  # refused before anything was made
