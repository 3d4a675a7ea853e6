"""Django (ASGI, settings in this module, no database) behind the middleware."""

from __future__ import annotations

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="not-a-secret: tests only",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        DATABASES={},
        INSTALLED_APPS=[],
        MIDDLEWARE=[],
        USE_TZ=True,
    )
    django.setup()

from django.core.asgi import get_asgi_application
from django.http import HttpRequest, HttpResponse
from django.urls import path

from tests.frameworks._limits import COOKIE, limited


def _text(body: str) -> HttpResponse:
    response = HttpResponse(body, content_type="text/plain")
    response.headers["Set-Cookie"] = COOKIE.format(name="django")
    return response


async def ok(request: HttpRequest) -> HttpResponse:
    return _text("ok")


async def file(request: HttpRequest, name: str) -> HttpResponse:
    return _text(name)


urlpatterns = [path("limited", ok), path("files/<str:name>", file)]
framework_app = get_asgi_application()
app = limited(framework_app)
