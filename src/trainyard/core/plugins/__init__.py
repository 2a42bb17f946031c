"""Built-in plugins; importing this package registers them (see `framework`)."""

from trainyard.core.plugins import order, scoring

__all__ = ["order", "scoring"]
