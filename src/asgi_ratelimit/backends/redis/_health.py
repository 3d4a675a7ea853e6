"""A backend's outages, as its log tells them: one ERROR when one starts, one WARNING when it ends.

    health = Health(lambda: repr(backend))
    health.failed("127.0.0.1:6379", "ConnectionLost: ...")   # the first failure logs ERROR
    health.failed("127.0.0.1:6379", "ServerSilent: ...")     # the same outage: nothing
    health.recovered("127.0.0.1:6379")                       # the last server back: WARNING

An outage lasts while any of the backend's servers is failing, and only a real reply from that
server ends its part (see `Node`): answers the backend gives locally (the deny cache) never
do. A problem no retry cures (credentials, permissions, a database index) is a configuration
error: it gets an ERROR of its own that says what to fix (`fix_for`), once per problem.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Health", "fix_for"]

logger = logging.getLogger("asgi_ratelimit")


class Health:
    """Which servers of one backend are failing, and the log lines that say so."""

    def __init__(self, owner: Callable[[], str]) -> None:
        self._owner = owner
        #: server -> why it is failing
        self._down: dict[str, str] = {}
        #: server -> the fix last logged for it
        self._misconfigured: dict[str, str] = {}

    @property
    def in_outage(self) -> bool:
        return bool(self._down)

    def is_down(self, server: str) -> bool:
        return server in self._down

    def failed(self, server: str, reason: str, fix: str | None = None) -> None:
        """``server`` failed: an outage starts unless one is under way."""
        if fix is not None and self._misconfigured.get(server) != fix:
            self._misconfigured[server] = fix
            logger.error(
                "%s: Redis at %s refused the configuration (%s): %s; until then requests get "
                "the on_backend_error policy",
                self._owner(), server, reason, fix,
            )  # fmt: skip
        elif not self._down:
            logger.error(
                "%s: Redis at %s failed (%s); requests get the on_backend_error policy until "
                "it answers again",
                self._owner(), server, reason,
            )  # fmt: skip
        self._down[server] = reason

    def recovered(self, server: str) -> None:
        """``server`` answered: the outage ends when no other server is failing."""
        if self._down.pop(server, None) is None:
            return
        self._misconfigured.pop(server, None)
        if not self._down:
            logger.warning(
                "%s: Redis at %s answers again; limits are enforced again", self._owner(), server
            )


def fix_for(error: str, db: int, acl: str) -> str | None:
    """What to change when the error reply ``error`` is a configuration problem no retry
    cures (credentials, a database index, permissions), else None."""
    message = error.upper()
    if (
        message.startswith("WRONGPASS")
        or "INVALID PASSWORD" in message
        or "INVALID USERNAME-PASSWORD" in message  # redis-py without the reply's code
        or "WITHOUT ANY PASSWORD CONFIGURED" in message
    ):
        return (
            "Redis refused the credentials: fix the username and password "
            "(redis://user:password@host, or password=...)"
        )
    if message.startswith("NOAUTH"):
        return (
            "Redis requires a password and got none: give it in the URL "
            "(redis://user:password@host, or password=...)"
        )
    if "DB INDEX" in message or "NOT ALLOWED IN CLUSTER MODE" in message:
        return (
            f"Redis has no database {db}: use an index the server has (its "
            "'databases' setting; Redis Cluster has only 0)"
        )
    # A command sent (NOPERM ...), or one the script ran ("ERR The user executing the
    # script can't run this command or subcommand", "... can't access ... the keys ...").
    if "NOPERM" in message or "USER EXECUTING THE SCRIPT CAN'T" in message:
        return (
            "the Redis user may not run every command the rate limiter sends, on the keys "
            f"of its prefix: grant them with ACL SETUSER <user> {acl}"
        )
    return None
