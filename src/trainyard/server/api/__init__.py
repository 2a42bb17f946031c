"""The REST API of the control plane (FastAPI): `create_app(engine_or_url)`.

Modules: `app` (the application factory and error handlers), `routes` (thin routers),
`services` (the work, one transaction per request), `schemas` (pydantic models of the wire
format, separate from the database models), `auth` (bearer tokens and roles), `errors`
(`ApiError`, the `{"error": {"field", "message"}}` body).
"""

from trainyard.server.api.app import create_app
from trainyard.server.api.errors import ApiError

__all__ = ["ApiError", "create_app"]
