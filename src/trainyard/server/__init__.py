"""The control plane: the server that stores jobs, runs the scheduler loop and talks to executors.

This package owns everything that has state outside a scheduling cycle:

- `db/`: the SQLAlchemy 2 models (the database is the source of truth), engine and session
  factories for SQLite (default, WAL) and PostgreSQL, and `init_db` (Alembic to head).
- `migrations/`: the Alembic environment and versions, shipped inside the package so that an
  installed wheel can create and upgrade its own database.
- `lifecycle.py`: the job state machine; every job state change goes through its `transition`,
  which records an event in the same transaction.
- `api/`: the REST API (thin routers, wire schemas, auth, errors).
- `services/`: the work behind the routes and `trainyard admin`.
- `loop/`: the scheduler loop (`Platform.step`, one scheduling round, the pending cache).
- `serve.py` (the process: API + loop), `bootstrap.py`, `config.py`, `metrics.py`.

The scheduling core (`trainyard.core`) never imports from here.
"""
