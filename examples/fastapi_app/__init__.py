"""The example API in FastAPI style: ``uvicorn examples.fastapi_app.main:app``."""
