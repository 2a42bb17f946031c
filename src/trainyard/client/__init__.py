"""The client side of the REST API: where the CLI keeps its login (`credentials`) and a small
typed HTTP client (`http`) that turns every failure into one clear message."""
