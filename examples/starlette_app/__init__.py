"""The example API in plain Starlette style: ``uvicorn examples.starlette_app.main:app``."""
