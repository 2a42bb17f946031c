"""The local executor: runs a job's ranks as real processes on this machine.

- `gpus`: what this node offers (NVML discovery, or clearly labelled virtual devices).
- `local`: `LocalExecutor` (launch, poll, stop, adopt after a server restart, logs).
- `run`: the values it takes and returns (`LaunchSpec`, `RunHandle`, `RunStatus`).
- `procfs`: process identity (pid + start time), atomic JSON files, free ports.
- `cgroups`: CPU / memory limits with cgroup v2 where the machine allows it.
- `rankwrap`: the tiny wrapper each rank runs under; it records the rank's exit code.
- `logs`: per-rank log files, read or followed.

This package imports nothing heavy at import time, so the server can load it cheaply.
"""
