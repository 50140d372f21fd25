"""Per-key rate limits (token bucket) and a per-key concurrency cap.

One tenant must not be able to fill the GPU queue for everybody: each API key (or
client address when auth is off) gets ``rate_limit_rps`` requests per second with bursts
of ``rate_limit_burst``, and at most ``max_concurrency_per_key`` requests in flight.
Refusals are ``Overloaded`` (429) whose ``Retry-After`` is the time until the bucket
holds a token again, so well-behaved clients retry exactly when they would succeed.

Limits are per replica (state in memory): with N replicas a key can reach N times the
rate. That is the usual trade-off (no shared-state round trip on every request); the
batcher's queue bound still protects each replica.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from fastapi import Request

from docparser_runtime.errors import Overloaded
from docparser_runtime.server.guards.auth import (
    ApiKeyStore,
    Principal,
    client_identity,
    require_api_key,
)
from docparser_runtime.settings import Settings

# Idle, full buckets are forgotten beyond this many tracked keys (bounded memory under
# a flood of distinct client addresses).
MAX_TRACKED_KEYS = 10_000


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Token buckets and in-flight counters keyed by client identity. Thread-safe."""

    def __init__(
        self,
        *,
        rps: float,
        burst: int,
        max_concurrency: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rps = rps
        self.burst = max(1, burst)
        self.max_concurrency = max_concurrency
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._inflight: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> RateLimiter:
        return cls(
            rps=settings.rate_limit_rps,
            burst=settings.rate_limit_burst,
            max_concurrency=settings.max_concurrency_per_key,
        )

    @property
    def enabled(self) -> bool:
        return self.rps > 0 or self.max_concurrency > 0

    def _refill(self, bucket: _Bucket, now: float) -> None:
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rps)
        bucket.updated = now

    def take(self, key: str) -> None:
        """Spend one token or raise ``Overloaded`` with the wait until the next one."""
        if self.rps <= 0:
            return
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(key)
            if bucket is None:
                self._forget_idle(now)
                bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            self._refill(bucket, now)
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return
            wait = (1.0 - bucket.tokens) / self.rps
        raise Overloaded(
            f"rate limit of {self.rps:g} requests/s (burst {self.burst}) exceeded for this key",
            retry_after_s=wait,
            code="rate_limited",
        )

    def acquire(self, key: str) -> None:
        """Take an in-flight slot or raise ``Overloaded``; pair with ``release``."""
        with self._lock:
            current = self._inflight.get(key, 0)
            if self.max_concurrency > 0 and current >= self.max_concurrency:
                raise Overloaded(
                    f"at most {self.max_concurrency} concurrent requests per key",
                    retry_after_s=1.0,
                    code="concurrency_limited",
                )
            self._inflight[key] = current + 1

    def release(self, key: str) -> None:
        with self._lock:
            left = self._inflight.get(key, 0) - 1
            if left > 0:
                self._inflight[key] = left
            else:
                self._inflight.pop(key, None)

    def inflight(self, key: str) -> int:
        with self._lock:
            return self._inflight.get(key, 0)

    def _forget_idle(self, now: float) -> None:
        if len(self._buckets) < MAX_TRACKED_KEYS:
            return
        for key, bucket in list(self._buckets.items()):
            self._refill(bucket, now)
            if bucket.tokens >= self.burst and key not in self._inflight:
                del self._buckets[key]
        if len(self._buckets) >= MAX_TRACKED_KEYS:  # all busy: drop the oldest
            oldest = min(self._buckets, key=lambda k: self._buckets[k].updated)
            del self._buckets[oldest]


def is_protected_path(path: str) -> bool:
    """API keys and limits guard the ``/v1`` API; probes, metrics and docs stay open."""
    return path == "/v1" or path.startswith("/v1/")


class AdmissionCounts(Protocol):
    """What admission reports (``ops.metrics.Metrics`` meets it): a request that passed
    the key check is client activity; a refusal is counted by its code."""

    def client_request(self) -> None: ...
    def reject(self, code: str) -> None: ...


Admission = Callable[[Request], AsyncIterator[Principal | None]]


def admission(
    api_keys: ApiKeyStore | None, limiter: RateLimiter | None, counts: AdmissionCounts
) -> Admission:
    """The app-wide FastAPI dependency: auth, then concurrency cap, then rate, on ``/v1``.
    A request that passed auth restarts the idleness clock here, on arrival.

    Installed once on the app (not per router) so a new ``/v1`` route cannot forget it.
    The slot is held until the response has been sent (FastAPI's default ``request``
    scope for ``yield`` dependencies), so streamed replies count while they stream.
    WHY a closure over its parts: the guards sit at the server's bottom, below the app's
    state and the metrics (ops), so the app hands them what they use.
    """

    async def enforce_limits(request: Request) -> AsyncIterator[Principal | None]:
        if not is_protected_path(request.scope.get("path", "")):
            yield None
            return
        principal = require_api_key(request, api_keys)
        counts.client_request()  # authenticated and routed: activity (scale to zero)
        if limiter is None or not limiter.enabled:
            yield principal
            return
        identity = client_identity(request, principal)
        try:
            limiter.acquire(identity)
        except Overloaded as exc:
            counts.reject(exc.code)
            raise
        try:
            limiter.take(identity)
        except Overloaded as exc:
            limiter.release(identity)
            counts.reject(exc.code)
            raise
        try:
            yield principal
        finally:
            limiter.release(identity)

    return enforce_limits
