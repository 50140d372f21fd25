"""Batch files in object storage through fsspec (``DOCPARSER_BATCH_STORAGE_URI``:
``file:///var/lib/docparser/batches``, ``s3://bucket/prefix``, ``memory://...`` in tests).

Every call that touches storage runs off the event loop (fsspec's file systems block). An
upload is written as it streams in, chunk by chunk, through a ``Writer``: the server never
holds a whole file, and a body past the limit stops the write and removes what was written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import fsspec

from ..errors import PayloadTooLarge
from .lines import LineIndex

READ_CHUNK = 1024 * 1024


class Writer:
    """One object being written: ``write`` chunks, then ``commit`` (or ``abort``)."""

    def __init__(self, storage: BatchStorage, name: str, limit: int, limit_name: str) -> None:
        self.storage, self.name, self.limit, self.limit_name = storage, name, limit, limit_name
        self.size = 0
        self.index = LineIndex()
        self._handle: Any = None

    async def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.size += len(chunk)
        if self.size > self.limit:
            raise PayloadTooLarge(
                f"the file exceeds {self.limit} bytes ({self.limit_name})",
                code="batch_file_too_large",
            )
        self.index.feed(chunk)
        if self._handle is None:
            self._handle = await asyncio.to_thread(self.storage.open_write, self.name)
        await asyncio.to_thread(self._handle.write, chunk)

    async def commit(self) -> list[tuple[int, int]]:
        """Close the object and write its line index beside it; returns the index."""
        if self._handle is None:
            self._handle = await asyncio.to_thread(self.storage.open_write, self.name)
        await asyncio.to_thread(self._handle.close)
        ranges = self.index.close()
        await asyncio.to_thread(self.storage.put, self.name + ".idx", LineIndex.pack(ranges))
        return ranges

    async def abort(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._handle.close)
        await self.storage.delete(self.name)


class BatchStorage:
    """Objects ``<root>/files/<file id>.jsonl`` and their line index ``.jsonl.idx``."""

    def __init__(self, root: str) -> None:
        self.fs, path = fsspec.core.url_to_fs(root)
        self.root = path.rstrip("/")

    def path(self, name: str) -> str:
        return f"{self.root}/files/{name}"

    @staticmethod
    def object_name(file_id: str) -> str:
        return f"{file_id}.jsonl"

    def open_write(self, name: str) -> Any:
        self.fs.makedirs(f"{self.root}/files", exist_ok=True)
        return self.fs.open(self.path(name), "wb")

    def put(self, name: str, data: bytes) -> None:
        with self.open_write(name) as handle:
            handle.write(data)

    def writer(self, file_id: str, *, limit: int, limit_name: str) -> Writer:
        return Writer(self, self.object_name(file_id), limit, limit_name)

    async def read_range(self, file_id: str, start: int, end: int) -> bytes:
        path = self.path(self.object_name(file_id))
        data: bytes = await asyncio.to_thread(self.fs.cat_file, path, start=start, end=end)
        return data

    async def line_index(self, file_id: str) -> list[tuple[int, int]]:
        path = self.path(self.object_name(file_id) + ".idx")
        data: bytes = await asyncio.to_thread(self.fs.cat_file, path)
        return LineIndex.unpack(data)

    async def stream(self, file_id: str) -> AsyncIterator[bytes]:
        handle = await asyncio.to_thread(self.fs.open, self.path(self.object_name(file_id)), "rb")
        try:
            while chunk := await asyncio.to_thread(handle.read, READ_CHUNK):
                yield chunk
        finally:
            await asyncio.to_thread(handle.close)

    async def exists(self, file_id: str) -> bool:
        found: bool = await asyncio.to_thread(self.fs.exists, self.path(self.object_name(file_id)))
        return found

    async def delete(self, name: str) -> None:
        """Remove an object and its index; one already gone is fine (GC and DELETE race)."""
        for path in (self.path(name), self.path(name + ".idx")):
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(self.fs.rm_file, path)


async def read_uri(uri: str, limit: int, limit_name: str) -> bytes:
    """A document named by a batch line's ``uri`` (already checked against the allowed
    prefixes), at most ``limit`` bytes: the size is asked first, and the read stops there."""

    def read() -> bytes:
        fs, path = fsspec.core.url_to_fs(uri)
        size = fs.size(path)
        if size is not None and size > limit:
            raise PayloadTooLarge(
                f"the document at uri exceeds {limit} bytes ({limit_name})",
                code="payload_too_large",
            )
        with fs.open(path, "rb") as handle:
            data: bytes = handle.read(limit + 1)
        if len(data) > limit:
            raise PayloadTooLarge(f"the document at uri exceeds {limit} bytes ({limit_name})")
        return data

    return await asyncio.to_thread(read)
