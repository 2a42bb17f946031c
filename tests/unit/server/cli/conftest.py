"""The CLI tests' fixtures, defined in cli_servers.py (a unique module name to import from)."""

from cli_servers import api_server, cli, running_server

__all__ = ["api_server", "cli", "running_server"]
