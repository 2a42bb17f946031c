"""The `trainyard` command line (typer + rich)."""
