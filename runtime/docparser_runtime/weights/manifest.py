"""The weights manifest: per-file sha256 of a model directory, and one digest over it.

A model directory is trusted through a single 64-hex value (the CRD's
``weights.sha256``). That value is the sha256 of the *canonical manifest bytes*, and the
manifest lists the sha256 and size of every file. Writing the canonical bytes verbatim
to ``docparser-manifest.json`` means ``sha256sum docparser-manifest.json`` prints the same
value, so users can check it with standard tools.

Pure apart from :func:`file_sha256` and :func:`build_manifest`, which read files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from docparser_runtime.errors import WeightsError

MANIFEST_NAME = "docparser-manifest.json"
# Top-level names fetch-weights uses for its own bookkeeping when the destination is a
# mount point (lock file, partial download); never part of a model.
WORK_PREFIX = ".docparser-"
MANIFEST_FORMAT = 1
CHUNK_BYTES = 1 << 20
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ManifestEntry:
    """One file of the model: path relative to the model root, POSIX separators."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """All files of a model directory, sorted by path (the manifest itself excluded)."""

    files: tuple[ManifestEntry, ...]

    def to_bytes(self) -> bytes:
        """Canonical encoding: sorted keys, no spaces, ASCII, one trailing newline."""
        doc = {
            "format": MANIFEST_FORMAT,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return (text + "\n").encode("ascii")

    def digest(self) -> str:
        """The top-level sha256 that the CRD carries."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and validate; any malformed manifest is a ``WeightsError``.

        Paths are checked here because a manifest comes from a remote source: an entry
        like ``../../etc/passwd`` must never become a write outside the destination.
        """
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise WeightsError(f"{MANIFEST_NAME}: not valid JSON ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
            raise WeightsError(f"{MANIFEST_NAME}: unsupported format (want {MANIFEST_FORMAT})")
        raw_files = doc.get("files")
        if not isinstance(raw_files, list):
            raise WeightsError(f"{MANIFEST_NAME}: 'files' must be a list")
        entries = [_parse_entry(item) for item in raw_files]
        return cls.from_entries(entries)

    @classmethod
    def from_entries(cls, entries: list[ManifestEntry]) -> Manifest:
        ordered = sorted(entries, key=lambda e: e.path)
        for prev, cur in itertools.pairwise(ordered):
            if prev.path == cur.path:
                raise WeightsError(f"{MANIFEST_NAME}: duplicate path {cur.path!r}")
        return cls(files=tuple(ordered))


def _parse_entry(item: object) -> ManifestEntry:
    if not isinstance(item, dict):
        raise WeightsError(f"{MANIFEST_NAME}: each file entry must be an object")
    path, size, sha = item.get("path"), item.get("size"), item.get("sha256")
    if not isinstance(path, str) or not is_safe_relative_path(path):
        raise WeightsError(f"{MANIFEST_NAME}: unsafe or invalid path {path!r}")
    if path == MANIFEST_NAME:
        raise WeightsError(f"{MANIFEST_NAME}: must not list itself")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise WeightsError(f"{MANIFEST_NAME}: bad size for {path!r}")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise WeightsError(f"{MANIFEST_NAME}: bad sha256 for {path!r}")
    return ManifestEntry(path=path, size=size, sha256=sha)


def is_safe_relative_path(path: str) -> bool:
    """True for a normalised relative POSIX path that stays inside its root."""
    if not path or "\\" in path or "\x00" in path or path.startswith("/"):
        return False
    parts = PurePosixPath(path).parts
    if PurePosixPath(path).as_posix() != path:
        return False
    return bool(parts) and all(p not in ("", ".", "..") for p in parts)


def normalize_sha256(value: str) -> str:
    """Lower-case and validate a user-supplied digest (CLI flag, CRD field)."""
    value = value.strip().lower()
    if value.startswith("sha256:"):
        value = value[len("sha256:") :]
    if not _HEX64.match(value):
        raise WeightsError(f"not a sha256 hex digest: {value!r}")
    return value


def file_sha256(path: Path) -> str:
    """Stream a file through sha256 (models are GBs: never read them whole)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def list_model_files(directory: Path) -> list[str]:
    """Relative POSIX paths of every file under ``directory`` except the manifest.

    Symlinked files are followed (Hugging Face caches link blobs); symlinked
    directories are not, so a link loop cannot hang the walk. Top-level
    ``.docparser-*`` entries are fetch-weights' own work files and are skipped.
    """
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        if Path(root) == Path(directory):
            dirs[:] = [d for d in dirs if not d.startswith(WORK_PREFIX)]
        dirs.sort()
        for name in files:
            full = Path(root) / name
            rel = full.relative_to(directory).as_posix()
            if rel == MANIFEST_NAME or rel.startswith(WORK_PREFIX) or not full.is_file():
                continue
            found.append(rel)
    return sorted(found)


def build_manifest(directory: Path) -> Manifest:
    """Hash every file of a model directory into a manifest."""
    directory = Path(directory)
    if not directory.is_dir():
        raise WeightsError(f"not a directory: {directory}")
    entries = []
    for rel in list_model_files(directory):
        full = directory / rel
        entries.append(ManifestEntry(rel, full.stat().st_size, file_sha256(full)))
    return Manifest.from_entries(entries)


def write_manifest(directory: Path) -> Manifest:
    """Build the manifest of ``directory`` and store it there; returns it."""
    manifest = build_manifest(directory)
    (Path(directory) / MANIFEST_NAME).write_bytes(manifest.to_bytes())
    return manifest
