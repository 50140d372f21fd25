"""How the Redis stores (jobs and batches) call Redis outside their Lua scripts: which
errors are transient, the API-side mapping of an unreachable Redis to 503, and replies as text.

WHY a module of its own, below both stores: these are the stores' typed seam to redis-py (whose
replies are typed ``bytes | str`` and whose script arguments are ``EncodableT``). The job and
batch stores are independent packages of one layer, so the seam they share sits a layer below
them instead of being written twice; it keeps each ``redis_store.py`` to its queue logic.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from .errors import Unavailable

T = TypeVar("T")
P = ParamSpec("P")
TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
# The ARGV of one script call.
ScriptArgs = list[EncodableT]


def unreachable_as_unavailable(
    store: str, code: str
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """A decorator for a store's API-side calls: clients get a 503 (retry elsewhere/later),
    not a 500, when Redis is down, with the store named and its own reason ``code``;
    worker-side calls handle their own failures."""

    def decorate(method: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(method)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return await method(*args, **kwargs)
            except TRANSIENT as exc:
                raise Unavailable(
                    f"{store} (Redis) is unreachable; retry shortly", code=code
                ) from exc

        return wrapper

    return decorate


def as_text(raw: bytes | str) -> str:
    """A Redis reply as text: this client returns bytes (no ``decode_responses``), while
    redis-py's types also allow str."""
    return raw.decode() if isinstance(raw, bytes) else raw


def texts(raw: dict[Any, Any]) -> dict[str, str]:
    """A Redis hash reply as text keys and values."""
    return {as_text(k): as_text(v) for k, v in raw.items()}
