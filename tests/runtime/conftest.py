"""Shared fixtures of the runtime tests (owner: H2; others add fixtures with minimal edits)."""

from redis_server import redis_server, redis_url  # noqa: F401  (real redis-server fixtures)
