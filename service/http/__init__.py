"""The HTTP side: the read API, admin endpoints, the dashboard and the uvicorn server."""
