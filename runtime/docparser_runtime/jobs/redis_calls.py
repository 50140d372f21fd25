"""How the Redis job store calls Redis outside its Lua scripts: which errors are
transient, the API-side mapping of an unreachable Redis to 503, and replies as text.

WHY a module of its own: these are the store's typed seam to redis-py (whose replies are
typed ``bytes | str`` and whose script arguments are ``EncodableT``), kept apart from the
store's queue logic so that ``redis_store.py`` stays readable (and under 400 lines).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from ..errors import Unavailable

T = TypeVar("T")
P = ParamSpec("P")
TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
# The ARGV of one script call.
ScriptArgs = list[EncodableT]


def unavailable_when_unreachable(
    method: Callable[P, Awaitable[T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Clients of the API get a 503 (retry elsewhere/later), not a 500, when Redis is
    down; worker-side calls handle their own failures."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise Unavailable(
                "the job store (Redis) is unreachable; retry shortly",
                code="job_store_unavailable",
            ) from exc

    return wrapper


def as_text(raw: bytes | str) -> str:
    """A Redis reply as text: this client returns bytes (no ``decode_responses``), while
    redis-py's types also allow str."""
    return raw.decode() if isinstance(raw, bytes) else raw
