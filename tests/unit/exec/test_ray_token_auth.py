"""docs/ray.md's Security section, end to end: on a Ray cluster with token authentication and
`--job-user dynamic`, the Ray executor runs a job, and the job's ranks can neither find the
cluster's token nor connect to the cluster (outside review 6, H1: without both, a job drove
the cluster). A server without the token is told what it lacks. The cluster runs in a child
process (`ray_token_child.py`): Ray's token mode holds for a whole process."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("ray_token_child.py")


def _needs_root_and_ray() -> None:
    in_ci = os.environ.get("CI", "").strip().lower() == "true"
    required = "ray" in os.environ.get("TRAINYARD_REQUIRE", "").lower() or in_ci
    if importlib.util.find_spec("ray") is None:
        if required:
            pytest.fail("Ray is required (TRAINYARD_REQUIRE/CI) but missing", pytrace=False)
        pytest.skip("Ray is not installed: pip install 'trainyard[ray]'")
    if os.geteuid() != 0:
        if in_ci:
            pytest.fail("the uid tests must run as root in CI", pytrace=False)
        pytest.skip("running jobs as other uids needs root")


def test_a_job_on_a_token_cluster_finds_no_token_and_cannot_connect() -> None:
    _needs_root_and_ray()
    top = Path(tempfile.mkdtemp(prefix="trainyard-raytoken-", dir="/tmp"))
    try:
        top.chmod(0o755)  # the job's uid passes through to its own folders
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        run = subprocess.run(
            [sys.executable, str(CHILD), str(top)],
            capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-4000:]
        out = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(top, ignore_errors=True)  # made outside pytest's tmp_path: ours to remove
    assert out["state"] == "succeeded", out["logs"]
    assert out["root_finds"], "the token was not where the rank could have found it as root"
    for log in out["logs"]:
        rank = json.loads(log.strip().splitlines()[-1])
        assert rank["uid"] != 0 and rank["ray_vars"] == [], rank
        assert rank["environs"] >= 1, rank  # it did read its own processes' environments
        assert rank["found"] == 0, rank
        assert rank["tries"] and all(t["rc"] != 0 and t["auth"] for t in rank["tries"]), rank
    assert out["no_token"].startswith("rc=2 "), out["no_token"]
    assert "token authentication" in out["no_token"] and "RAY_AUTH_TOKEN" in out["no_token"]
