"""Entry point of the `trainyard` command: one typer app, one module per command group.

Each command module exposes `register(app)`; errors that come from user input are printed as
one clear line (exit code 2), never as a traceback.

Start-up is part of the interface (issue 19): a client command (`submit`, `jobs`, `wait`,
...) must answer in about the time `squeue` does, so `main` imports only the module of the
command being run (`COMMANDS` maps each top-level name to its module). The commands that
speak HTTP never load SQLAlchemy, FastAPI, uvicorn, numpy, torch, the planner or the
simulator; `admin`, `up`, `simulate`, `plan`, ... load their stacks when they run. `--help`
without a command, shell completion and an unknown name register every module (so help lists
everything and typer's "No such command" suggestions still work).

Exit codes (also in `trainyard --help`): 0 success; 1 for `wait` when a job did not succeed
(its own exit status when it has one: see `trainyard wait --help`); 2 bad input or a failed
request, with one `error:` line; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import typer

from trainyard import __version__

# top-level command -> the module that registers it (the order is the order of --help)
COMMANDS: dict[str, str] = {
    "bench": "bench",
    "demo": "demo",
    "plan": "plan",
    "probe": "probe",
    "schedule": "schedule",
    "simulate": "simulate",
    "up": "up",
    "console": "console",
    "submit": "submit",
    "jobs": "joblist",
    "describe": "jobs",
    "cancel": "jobs",
    "wait": "wait",
    "logs": "logs",
    "queues": "cluster",
    "nodes": "cluster",
    "usage": "usage",
    "login": "auth",
    "logout": "auth",
    "whoami": "auth",
    "token": "auth",
    "admin": "admin",
}
# modules that add subcommands to `admin` when imported
ADMIN_PARTS = (
    "admin_audit",
    "admin_gc",
    "admin_jobs",
    "admin_nodes",
    "admin_queues",
    "admin_usage",
)
COMPLETION_VAR = "_TRAINYARD_COMPLETE"

EPILOG = (
    "Exit codes: 0 success; 1 `wait`: a job did not succeed (see `trainyard wait --help`); "
    "2 bad input or a failed request (one `error:` line); 130 interrupted."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"trainyard {__version__}")
        raise typer.Exit()


def build(names: Sequence[str] | None = None) -> typer.Typer:
    """The app with the modules of `names` registered (every module when None)."""
    app = typer.Typer(
        name="trainyard",
        help="Schedule and run deep-learning training jobs on GPU clusters.",
        epilog=EPILOG,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version."
        ),
    ) -> None:
        """Schedule and run deep-learning training jobs on GPU clusters."""

    modules: list[str] = []
    for name in COMMANDS if names is None else names:
        module = COMMANDS[name]
        if module not in modules:
            modules.append(module)
    for module in modules:
        loaded = importlib.import_module(f"trainyard.cli.{module}")
        if module == "admin":
            for part in ADMIN_PARTS:
                importlib.import_module(f"trainyard.cli.{part}")
        loaded.register(app)
    return app


def command_of(argv: Sequence[str]) -> str | None:
    """The top-level command `argv` runs (None: none, or help/completion of the whole app)."""
    if os.environ.get(COMPLETION_VAR):
        return None
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


# The exceptions of the click Typer runs on (Typer 0.28 carries a copy of its own, whose module
# is private: it is found through a public class of Typer's that derives from one of them).
_ERRORS = sys.modules[typer.BadParameter.__module__]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    name = command_of(args)
    app = build(None if name is None else [name])
    try:
        code = app(args=args, prog_name="trainyard", standalone_mode=False)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise SystemExit(130) from None
    except _ERRORS.NoArgsIsHelpError as error:  # (a usage error that shows help)
        error.show()
        raise SystemExit(error.exit_code) from None
    except _ERRORS.UsageError as error:  # what the option parser itself refuses
        where = f"trainyard {name} --help" if name else "trainyard --help"
        typer.echo(f"error: {error.format_message()} (see {where})", err=True)
        raise SystemExit(2) from None
    except _ERRORS.ClickException as error:
        error.show()
        raise SystemExit(error.exit_code) from None
    except typer.Abort:
        typer.echo("aborted", err=True)
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def __getattr__(attr: str) -> object:
    """`trainyard.cli.main.app`: the whole app (for tests and tools that import it)."""
    if attr == "app":
        return build()
    raise AttributeError(attr)


if __name__ == "__main__":
    main()
