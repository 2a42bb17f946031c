"""Run by test_ray_token_auth.py in a process of its own (Ray's token mode is set for a whole
process, and the other Ray tests' cluster runs without it): a one-node Ray cluster with
token authentication, the Ray executor connected to it with the token, and a job whose ranks
run as their own uid (`--job-user dynamic`) looking for the token everywhere they can read
and trying to connect to the cluster with what they found. Prints one JSON line.

    python ray_token_child.py TOP   (TOP: an empty folder the job's uid may pass through)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

TOKEN = secrets.token_hex(16)
os.environ.update(
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN
)
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()

# The rank: where a job would look for the token (every process's environment and command
# line it may read, Ray's session folders), then a connection with each one found, or none.
PROBE = r"""
import glob, hashlib, json, os, re, subprocess, sys
address, digest = sys.argv[1], sys.argv[2]
found, environs = set(), 0
def scan(data):
    for word in re.findall(rb"[0-9a-f]{32}", data):
        if hashlib.sha256(word).hexdigest() == digest:
            found.add(word.decode())
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        continue
    environs += path.endswith("environ")
    scan(data)
for top, _, files in os.walk("/tmp/ray"):
    for name in files:
        try:
            with open(os.path.join(top, name), "rb") as f:
                scan(f.read(1 << 20))
        except OSError:
            pass
tries = []
for token in sorted(found) or [None]:
    env = dict(os.environ, RAY_AUTH_MODE="token", **({"RAY_AUTH_TOKEN": token} if token else {}))
    connect = "import ray, sys; ray.init(address=sys.argv[1]); print(len(ray.nodes()))"
    run = subprocess.run([sys.executable, "-c", connect, address], env=env,
                         capture_output=True, text=True, timeout=180)
    tries.append({"rc": run.returncode, "auth": "AuthenticationError" in run.stderr,
                  "out": run.stdout.strip()})
ray_vars = sorted(k for k in os.environ if k.startswith("RAY_"))
print(json.dumps({"uid": os.getuid(), "ray_vars": ray_vars, "found": len(found),
                  "environs": environs, "tries": tries}), flush=True)
"""


def _root_finds_the_token() -> bool:
    """The same search as the rank's, as root: the token is there to be found (in the Ray
    processes' environments), so the rank's empty search is not an empty scan."""
    for path in Path("/proc").glob("[0-9]*/environ"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for word in re.findall(rb"[0-9a-f]{32}", data):
            if hashlib.sha256(word).hexdigest() == DIGEST:
                return True
    return False


def _server_without_the_token(address: str, runs: Path) -> str:
    """What a server started without the token says (its stderr's last line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    code = (
        "import sys\nfrom trainyard.exec.ray import RayExecutor, RayMissing\n"
        "try:\n    RayExecutor(sys.argv[1], address=sys.argv[2])\n"
        "except RayMissing as error:\n    print(error)\n    sys.exit(2)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(runs), address],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    return f"rc={run.returncode} {run.stdout.strip()}"


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    from trainyard.exec.identity import JobUsers
    from trainyard.exec.ray import RayExecutor
    from trainyard.exec.run import Host, LaunchSpec

    top = Path(sys.argv[1])
    cluster = Cluster(
        initialize_head=True, shutdown_at_exit=False,
        head_node_args={"num_cpus": 1, "num_gpus": 0},
    )  # fmt: skip
    try:
        cluster.add_node(num_cpus=2, num_gpus=2, labels={"trainyard.io/node": "w1"})
        cluster.wait_for_nodes()
        runs = top / "runs"
        ex = RayExecutor(
            runs, address=cluster.address, virtual_gpus=True,
            users=JobUsers.create("dynamic", runs),
        )  # fmt: skip
        try:
            spec = LaunchSpec(
                "j-token", [sys.executable, "-c", PROBE, cluster.address, DIGEST],
                hosts=(Host("w1", (0, 1), 2),), virtual_gpus=True,
            )  # fmt: skip
            handle = ex.launch(spec)
            deadline = time.monotonic() + 400
            while not (status := ex.poll(handle)).settled and time.monotonic() < deadline:
                time.sleep(0.1)
            logs = [r.log.read_text() for r in handle.ranks]
        finally:
            ex.close()
        out = {
            "state": status.state, "logs": logs, "root_finds": _root_finds_the_token(),
            "no_token": _server_without_the_token(cluster.address, top / "runs2"),
        }  # fmt: skip
        print(json.dumps(out), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
