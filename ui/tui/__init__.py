"""The terminal dashboard: a Textual client of the HTTP API and the SSE feed."""
