"""The control plane's services: the work behind the API routes and `trainyard admin`.

Each function takes a SQLAlchemy `Session` (and, for the API, the caller's `Principal`),
checks its input before writing, and writes inside the caller's one transaction; routers and
CLI commands stay thin and only translate.

- `jobs`: submit, list, describe, cancel; queues and nodes as the API shows them.
- `intake`: submissions validated in the request and stored by one writer with group commit.
- `tokens`: API tokens through the API.
- `logs`: a job's logs as the API serves them (reading the executor's files).
- `logins`: the web console's login codes, sessions (API tokens of their own) and CSRF tokens.
- `tenancy`: the caller's tenant and its users, for its admins (the console's tenant page).
- `admin`, `nodes`: operator administration straight on the database (tenants, users,
  tokens, queues; node drain and return).
"""
