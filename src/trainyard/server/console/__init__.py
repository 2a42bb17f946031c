"""The web console: the cluster, queues, jobs, usage and tenants in a browser, live.

Served by the API's own FastAPI app (`install` adds it to `create_app`'s app) under `/`,
with the API's authentication and services: a page asks the same services the REST routes
do, with the caller's `Principal`, so roles and tenant isolation are the API's, and a form
writes through the REST API itself (`/v1/...`, with the session cookie and a CSRF token),
so its errors are the API's `{"error": {"field", "message"}}`, shown next to the field.

- `web.py`: the router's plumbing: templates, the page principal (login by link, the
  session cookie), page responses, security headers, the static files.
- `login.py`: `/login`, `/logout` and login by `/?token=...`.
- `pages.py`: one route per page; each builds its context in `views.py` and renders it, or,
  asked for `text/event-stream`, streams its live regions (`live.py`).
- `views.py`: what each page shows, from the services (`server/services/`).
- `charts.py`: inline SVG charts (lines, steps, stacked areas, bars), with text equivalents.
- `live.py`: server-sent events: one watcher per app notices changes in the database
  cheaply; each open page re-renders its live regions and sends the ones that changed; job
  logs are followed per rank.
- `simreports.py`: the simulator's reports (`trainyard simulate --report DIR`) as a page.

Templates (Jinja2) and the hand-written CSS and JavaScript ship in the package
(`templates/`, `static/`); nothing is loaded from elsewhere. See docs/console.md.
"""

from trainyard.server.console.web import ConsoleSettings, install

__all__ = ["ConsoleSettings", "install"]
