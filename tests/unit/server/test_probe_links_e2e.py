"""Issue 18, acceptance 4: `trainyard probe links` end to end on the local executor.

A real `trainyard up` (SQLite, 4 declared GPUs) runs the probe as a 2-rank job: real
torch.distributed over gloo (the GPUs are virtual, said so), all-reduce and all-gather timed
at sizes from 8 B to 128 KiB. The CLI waits for it, reads the result from rank 0's log and stores
it; `trainyard plan --links` then fits the measured run and plans on it. Only waits have
timeouts; nothing asserts on the measured speed (a busy machine), only on what was measured.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from test_up_e2e import Up, wait_for

pytestmark = pytest.mark.slow


def test_probe_links_job_stores_a_result_the_planner_reads(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="trainyard-probe-", dir="/tmp"))
    up = Up(tmp_path, f"sqlite:///{tmp_path / 'trainyard.db'}", home, examples=[])
    try:
        wait_for("the server", lambda: up.cli("whoami", check=False).returncode == 0, up)
        out = tmp_path / "links.json"
        probed = up.cli(
            "probe", "links", "--workers", "2", "--max-bytes", "262144", "--out", str(out)
        )
        assert f"stored in {out}" in probed.stdout, probed.stdout + probed.stderr
        result = json.loads(out.read_text())
        assert result["backend"] == "gloo"
        assert [c["collective"] for c in result["collectives"]] == ["all_reduce", "all_gather"]
        for run in result["collectives"]:
            assert run["ranks"] == 2 and run["nodes"] == 1
            # 8 bytes, then x4 up to --max-bytes
            assert [size for size, _ in run["sizes"]] == [8 * 4**i for i in range(8)]
            assert all(t > 0 for _, t in run["sizes"])
        job = json.loads(up.cli("describe", result["job"], "--json").stdout)
        assert job["state"] == "SUCCEEDED"

        planned = up.cli(
            "plan", "-m", "gpt3-125m", "-n", "2", "-g", "H100", "--links", str(out), "--json"
        )
        plan = json.loads(planned.stdout)
        fits = plan["links"]
        assert {f["collective"] for f in fits} == {"all_reduce", "all_gather"}
        assert all(f["level"] == "intra" and f["busbw_gbps"] > 0 for f in fits)
        assert any(str(out) in note for note in plan["launch"]["notes"])
    finally:
        up.stop()
        print(up.output())
        shutil.rmtree(home, ignore_errors=True)
