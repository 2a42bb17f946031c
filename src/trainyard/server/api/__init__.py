"""The REST API of the control plane (FastAPI): `app.create_app(engine_or_url)`.

Modules: `app` (the application factory and error handlers), `routes` (thin routers over
`trainyard.server.services`), `schemas` (pydantic models of the wire format, separate from the
database models), `auth` (bearer tokens and roles), `errors` (`ApiError`, the
`{"error": {"field", "message"}}` body). The package imports none of them itself, so a
service may import `auth`, `errors` or `schemas` without loading the application.
"""
