"""An ASGI 2 app (a class called with the scope, its instance with receive and send) behind
the middleware, which every server below sees as one ASGI 3 app."""

from __future__ import annotations

from typing import Any

from tests.frameworks._limits import limited


class ASGI2App:
    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope

    async def __call__(self, receive: Any, send: Any) -> None:
        if self.scope["type"] != "http":
            return  # lifespan: nothing to start
        headers = [(b"content-type", b"text/plain"), (b"set-cookie", b"framework=asgi2; Path=/")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self.scope["path"].encode()})


app = limited(ASGI2App)
