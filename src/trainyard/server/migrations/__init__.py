"""Alembic migrations of the trainyard database (run by `trainyard.server.db.session`)."""
