"""Entry point of the `trainyard` command: one typer app, one module per command group.

Each command module exposes `register(app)`; errors that come from user input are printed as
one clear line (exit code 2), never as a traceback.
"""

from __future__ import annotations

import typer

from trainyard.cli import (
    admin,
    admin_audit,  # noqa: F401 (adds `admin audit` to the admin group on import)
    admin_gc,  # noqa: F401 (adds `admin gc` to the admin group on import)
    admin_jobs,  # noqa: F401 (adds `admin job` to the admin group on import)
    admin_nodes,  # noqa: F401 (adds `admin node` to the admin group on import)
    admin_queues,  # noqa: F401 (adds `admin queue` commands on import)
    auth,
    bench,
    cluster,
    demo,
    jobs,
    logs,
    plan,
    schedule,
    simulate,
    up,
    usage,
)

app = typer.Typer(
    name="trainyard",
    help="Schedule and run deep-learning training jobs on GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in (
    bench, demo, plan, schedule, simulate, up, jobs, logs, cluster, usage, auth, admin,
):  # fmt: skip
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
