"""The doors frameworks open: the FastAPI dependency, the Starlette decorator, OpenAPI. Internal."""
