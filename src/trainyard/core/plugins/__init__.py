"""Built-in plugins; importing this package registers them (see `framework`)."""

from trainyard.core.plugins import job_orders, scoring

__all__ = ["job_orders", "scoring"]
