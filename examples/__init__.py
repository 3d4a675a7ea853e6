"""Example apps for asgi_ratelimit: the same API in FastAPI and in plain Starlette."""
