"""Download model weights from a URI, verify every byte, and move them into place atomically.

Used by ``docparser-runtime fetch-weights`` (the operator's init container). The source
holds the model files plus ``docparser-manifest.json``; the manifest is what makes plain
HTTP servers work (no directory listing needed) and is what the pinned ``sha256`` covers.

Crash safety: files land in a partial directory next to ``dest`` (same filesystem) and
the directory is renamed into place only after every file verified, so a reader of
``dest`` never sees a half-written model. A killed run leaves the partial directory
behind; the next run keeps the files in it that still verify and discards the rest.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from docparser_runtime.errors import WeightsError
from docparser_runtime.weights.manifest import (
    MANIFEST_NAME,
    WORK_PREFIX,
    Manifest,
    ManifestEntry,
    file_sha256,
    normalize_sha256,
)
from docparser_runtime.weights.verify import read_local_manifest, verify_tree

log = logging.getLogger(__name__)

DOWNLOAD_ATTEMPTS = 3
# fsspec crosses into its event-loop thread once per read(): 8 MiB reads measured ~2x the
# throughput of 1 MiB reads on a local HTTP server.
DOWNLOAD_CHUNK_BYTES = 8 << 20
PARTIAL_SUFFIX = ".part"


@dataclass(frozen=True)
class Source:
    """An opened source: an fsspec filesystem and the root path/URL inside it."""

    fs: Any  # an fsspec AbstractFileSystem (fsspec ships no types)
    root: str
    is_http: bool

    def url_of(self, rel: str) -> str:
        rel = quote(rel) if self.is_http else rel
        return f"{self.root.rstrip('/')}/{rel}"


@dataclass(frozen=True)
class WorkPaths:
    """Where the partial download, the lock and the displaced old copy live."""

    partial: Path
    lock: Path
    old: Path
    in_place: bool  # dest is a mount point: work inside it, it cannot be renamed


def open_source(source: str, storage_options: dict[str, Any] | None = None) -> Source:
    """Map a URI or a plain (mounted) path to an fsspec filesystem."""
    import fsspec  # lazy: only fetch-weights needs it

    if "://" not in source:
        fs = fsspec.filesystem("file")
        return Source(fs, str(Path(source).absolute()), is_http=False)
    scheme = source.split("://", 1)[0].lower()
    if scheme == "pvc":
        raise WeightsError(
            "pvc:// is mounted by the operator: pass the mounted directory path as --source"
        )
    try:
        fs, root = fsspec.core.url_to_fs(source, **(storage_options or {}))
    except ImportError as exc:
        raise WeightsError(f"{scheme}:// needs an extra package: {exc}") from exc
    except ValueError as exc:
        raise WeightsError(f"unsupported weights source {source!r}: {exc}") from exc
    is_http = scheme in ("http", "https")
    return Source(fs, source.rstrip("/") if is_http else root, is_http=is_http)


def _open_remote(src: Source, rel: str) -> BinaryIO:
    # block_size=0 streams HTTP bodies (no Range requests, which simple servers lack).
    kwargs = {"block_size": 0} if src.is_http else {}
    opened: BinaryIO = src.fs.open(src.url_of(rel), "rb", **kwargs)
    return opened


def fetch_manifest(src: Source, expected: str | None) -> Manifest:
    try:
        with _open_remote(src, MANIFEST_NAME) as fh:
            data = fh.read()
    except FileNotFoundError as exc:
        raise WeightsError(f"missing file {MANIFEST_NAME} at {src.root}") from exc
    except Exception as exc:
        raise WeightsError(f"cannot read {MANIFEST_NAME} at {src.root}: {exc}") from exc
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None and actual != expected:
        raise WeightsError(f"sha256 mismatch for {MANIFEST_NAME}: {actual} != {expected}")
    manifest = Manifest.from_bytes(data)
    if manifest.to_bytes() != data:
        # The pinned digest covers the canonical bytes; refuse look-alike encodings.
        raise WeightsError(f"{MANIFEST_NAME} at {src.root} is not in canonical form")
    return manifest


def _work_paths(dest: Path) -> WorkPaths:
    if os.path.ismount(dest):
        return WorkPaths(
            dest / f"{WORK_PREFIX}partial",
            dest / f"{WORK_PREFIX}lock",
            dest / f"{WORK_PREFIX}old",
            True,
        )
    parent, name = dest.parent, dest.name
    return WorkPaths(
        parent / f".{name}.partial", parent / f".{name}.lock", parent / f".{name}.old", False
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise fetches into one dest (two pods sharing a volume must not interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _dest_is_current(dest: Path, digest: str) -> bool:
    """True when ``dest`` already holds exactly the manifest ``digest`` and verifies."""
    try:
        local = read_local_manifest(dest)
        if local.digest() != digest:
            return False
        verify_tree(dest, local)
    except WeightsError as exc:
        log.info("existing %s is not current: %s", dest, exc.message)
        return False
    return True


def _prepare_partial(partial: Path, manifest: Manifest) -> None:
    """Drop leftovers of a killed run that cannot be reused (``.part`` files, strays)."""
    listed = {e.path for e in manifest.files}
    if not partial.is_dir():
        partial.mkdir(parents=True)
        return
    for root, _dirs, files in os.walk(partial):
        for name in files:
            full = Path(root) / name
            if full.relative_to(partial).as_posix() not in listed:
                full.unlink()


def _download(src: Source, entry: ManifestEntry, part: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with _open_remote(src, entry.path) as fh, open(part, "wb") as out:
        while chunk := fh.read(DOWNLOAD_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
            if size > entry.size:
                break  # longer than promised: stop early, it cannot verify
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), size


def _fetch_file(src: Source, entry: ManifestEntry, partial: Path) -> bool:
    """Put one verified file into ``partial``; returns True when it was downloaded."""
    target = partial / entry.path
    reusable = target.is_file() and target.stat().st_size == entry.size
    if reusable and file_sha256(target) == entry.sha256:
        return False  # verified leftover from an interrupted run
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + PARTIAL_SUFFIX)
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            digest, size = _download(src, entry, part)
            break
        except FileNotFoundError as exc:
            part.unlink(missing_ok=True)
            raise WeightsError(f"missing file {entry.path} at {src.root}") from exc
        except Exception as exc:
            part.unlink(missing_ok=True)
            if attempt == DOWNLOAD_ATTEMPTS:
                raise WeightsError(f"download failed for {entry.path}: {exc}") from exc
            log.warning("retrying %s after error: %s", entry.path, exc)
            time.sleep(0.5 * attempt)
    if size != entry.size or digest != entry.sha256:
        part.unlink(missing_ok=True)
        raise WeightsError(
            f"sha256 mismatch for {entry.path}: got {size} bytes sha256 {digest}, "
            f"manifest says {entry.size} bytes sha256 {entry.sha256}"
        )
    os.replace(part, target)
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_into_place(dest: Path, work: WorkPaths) -> None:
    """Make the verified partial directory the new ``dest``."""
    if work.in_place:
        # A mount point cannot be renamed: clear it, move entries in, manifest last
        # (serve refuses a directory without a matching manifest, so a crash here is safe).
        keep = {work.partial.name, work.lock.name, "lost+found"}  # ext4 volumes have one
        for child in dest.iterdir():
            if child.name not in keep:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        children = sorted(work.partial.iterdir(), key=lambda p: p.name == MANIFEST_NAME)
        for child in children:
            os.replace(child, dest / child.name)
        work.partial.rmdir()
        _fsync_dir(dest)
        return
    shutil.rmtree(work.old, ignore_errors=True)
    if dest.exists():
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
        else:
            os.replace(dest, work.old)
    os.replace(work.partial, dest)
    _fsync_dir(dest.parent)
    shutil.rmtree(work.old, ignore_errors=True)


def _pinned_manifest(manifest: Path | None, expected: str | None) -> Manifest | None:
    if manifest is None:
        return None
    try:
        data = Path(manifest).read_bytes()
    except OSError as exc:
        raise WeightsError(f"cannot read manifest {manifest}: {exc.strerror or exc}") from exc
    pinned = Manifest.from_bytes(data)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise WeightsError(f"sha256 mismatch for {manifest}: does not match --sha256")
    return pinned


def fetch_weights(
    source: str,
    dest: Path,
    *,
    sha256: str | None,
    manifest: Path | None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Fetch ``source`` into ``dest``, verified against ``sha256`` and/or a local manifest.

    With neither, the source's own manifest is trusted (files are still checked against
    it, catching corrupt transfers but not a tampered source). Raises ``WeightsError``
    naming the offending file on any mismatch or missing file.
    """
    dest = Path(dest).absolute()
    expected = normalize_sha256(sha256) if sha256 else None
    pinned = _pinned_manifest(manifest, expected)
    if expected is None and pinned is None:
        log.warning("no --sha256 or --manifest: trusting the manifest served by %s", source)
    try:
        _fetch_locked(source, dest, expected, pinned, storage_options)
    except OSError as exc:  # local disk trouble (read-only, full): still a clear message
        raise WeightsError(f"cannot write weights into {dest}: {exc}") from exc


def _fetch_locked(
    source: str,
    dest: Path,
    expected: str | None,
    pinned: Manifest | None,
    storage_options: dict[str, Any] | None,
) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = _work_paths(dest)
    with _locked(work.lock):
        digest = pinned.digest() if pinned is not None else expected
        if digest is not None and dest.is_dir() and _dest_is_current(dest, digest):
            log.info("weights already present and verified in %s", dest)
            return
        src = open_source(source, storage_options)
        wanted = pinned if pinned is not None else fetch_manifest(src, expected)
        unpinned = pinned is None and expected is None
        if unpinned and dest.is_dir() and _dest_is_current(dest, wanted.digest()):
            log.info("weights already present and verified in %s", dest)
            return
        _prepare_partial(work.partial, wanted)
        fetched = sum(_fetch_file(src, entry, work.partial) for entry in wanted.files)
        manifest_path = work.partial / MANIFEST_NAME
        manifest_path.write_bytes(wanted.to_bytes())
        _swap_into_place(dest, work)
    log.info(
        "weights in %s: %d files (%d downloaded, %d reused), %d bytes, sha256 %s",
        dest,
        len(wanted.files),
        fetched,
        len(wanted.files) - fetched,
        wanted.total_bytes,
        wanted.digest(),
    )
