"""What the batch routes and the batch worker share in one process: the state store (Redis),
the object storage of files, and the settings they read their limits from."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import NotFound
from ..settings import Settings
from .redis_store import RedisBatchStore
from .storage import BatchStorage


@dataclass
class BatchBackend:
    settings: Settings
    store: RedisBatchStore
    storage: BatchStorage

    async def close(self) -> None:
        await self.store.close()


def create_batch_backend(settings: Settings) -> BatchBackend | None:
    """None when batches are not configured: they need both Redis (state any replica reads)
    and object storage (files larger than any Redis value should be)."""
    if not settings.redis_url or not settings.batch_storage_uri:
        return None
    store = RedisBatchStore.from_url(settings.redis_url, prefix=settings.redis_prefix)
    return BatchBackend(settings, store, BatchStorage(settings.batch_storage_uri))


def not_configured() -> NotFound:
    """404, not 503: the deployment has no batches, and retrying will not change that."""
    return NotFound(
        "batches are not configured here (DOCPARSER_REDIS_URL and DOCPARSER_BATCH_STORAGE_URI)",
        code="batches_not_configured",
    )
