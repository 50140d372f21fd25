"""Check a model directory against its manifest before anything loads it.

``serve`` refuses to start on weights it cannot vouch for: a directory without a
manifest, a manifest whose digest is not the pinned one, or any file whose size or
sha256 differs (a truncated copy, a bit flip, a swapped file). Hashing all files costs
about as much as reading them once, and the model load right after reads the same bytes
from the now-warm page cache, so the check adds little to start-up time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from docparser_runtime.errors import WeightsError
from docparser_runtime.settings import Settings
from docparser_runtime.weights.manifest import (
    MANIFEST_NAME,
    Manifest,
    file_sha256,
    list_model_files,
    normalize_sha256,
)

log = logging.getLogger(__name__)


def verify_tree(directory: Path, manifest: Manifest) -> None:
    """Raise ``WeightsError`` naming the first file that is missing, differs or is extra."""
    directory = Path(directory)
    for entry in manifest.files:
        full = directory / entry.path
        if not full.is_file():
            raise WeightsError(f"missing file {entry.path} in {directory}")
        size = full.stat().st_size
        if size != entry.size:
            raise WeightsError(f"size mismatch for {entry.path}: {size} != {entry.size} bytes")
        actual = file_sha256(full)
        if actual != entry.sha256:
            raise WeightsError(f"sha256 mismatch for {entry.path}: {actual} != {entry.sha256}")
    listed = {e.path for e in manifest.files}
    extra = [p for p in list_model_files(directory) if p not in listed]
    if extra:
        raise WeightsError(f"file not in manifest: {extra[0]} in {directory}")


def read_local_manifest(directory: Path) -> Manifest:
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        raise WeightsError(f"no {MANIFEST_NAME} in {directory}: weights are unverified")
    return Manifest.from_bytes(path.read_bytes())


def verify_weights(directory: Path, *, sha256: str | None = None) -> Manifest:
    """Verify ``directory`` fully; when ``sha256`` is given the manifest must match it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise WeightsError(f"model directory not found: {directory}")
    manifest = read_local_manifest(directory)
    if sha256 is not None:
        expected = normalize_sha256(sha256)
        if manifest.digest() != expected:
            raise WeightsError(
                f"{MANIFEST_NAME} in {directory} has sha256 {manifest.digest()}, "
                f"expected {expected}"
            )
    verify_tree(directory, manifest)
    return manifest


def check_serving_weights(settings: Settings) -> Manifest | None:
    """Gate used by ``serve``: verify the model directory or refuse.

    A DeepSeek-OCR-2 model directory is always checked. The embedded ``rapidocr`` engine
    ships its models inside its wheel (already verified by the installer), so its directory
    is checked only when a digest is pinned (the operator pins one for every weights it
    mounts: a ``pvc://`` source or the weights cache is verified where it lies, never
    copied). With ``allow_unverified_weights`` a failure is logged and serving goes on.
    """
    if settings.model_path is None:
        return None
    if settings.engine != "deepseek-ocr2" and settings.weights_sha256 is None:
        return None
    try:
        manifest = verify_weights(settings.model_path, sha256=settings.weights_sha256)
    except WeightsError as exc:
        if settings.allow_unverified_weights:
            log.warning("serving UNVERIFIED weights (allow_unverified_weights): %s", exc.message)
            return None
        raise
    log.info(
        "weights verified: %s (%d files, %d bytes, sha256 %s)",
        settings.model_path,
        len(manifest.files),
        manifest.total_bytes,
        manifest.digest(),
    )
    return manifest
