"""Manifest: deterministic canonical bytes, digest, path safety."""

from __future__ import annotations

import hashlib
import json

import pytest
from docparser_runtime.errors import WeightsError
from docparser_runtime.weights.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestEntry,
    build_manifest,
    is_safe_relative_path,
    normalize_sha256,
    write_manifest,
)


def _make_tree(root, order):
    files = {
        "config.json": b'{"model_type": "deepseek_ocr2"}',
        "model.safetensors": bytes(range(256)) * 5000,
        "tokenizer/vocab.txt": b"a\nb\nc\n",
        "empty.bin": b"",
    }
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])
    return files


def test_manifest_is_deterministic_and_sorted(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    files = _make_tree(a, ["config.json", "model.safetensors", "tokenizer/vocab.txt", "empty.bin"])
    _make_tree(b, ["tokenizer/vocab.txt", "empty.bin", "model.safetensors", "config.json"])
    ma, mb = build_manifest(a), build_manifest(b)
    assert ma.to_bytes() == mb.to_bytes()
    assert [f.path for f in ma.files] == sorted(files)
    for entry in ma.files:
        assert entry.size == len(files[entry.path])
        assert entry.sha256 == hashlib.sha256(files[entry.path]).hexdigest()


def test_written_manifest_digest_equals_sha256_of_file(tmp_path):
    _make_tree(tmp_path, ["config.json", "model.safetensors"])
    manifest = write_manifest(tmp_path)
    on_disk = (tmp_path / MANIFEST_NAME).read_bytes()
    assert hashlib.sha256(on_disk).hexdigest() == manifest.digest()
    # Rebuilding with the manifest present does not list the manifest itself.
    assert build_manifest(tmp_path).digest() == manifest.digest()
    doc = json.loads(on_disk)
    assert doc["format"] == 1 and MANIFEST_NAME not in [f["path"] for f in doc["files"]]


def test_one_changed_byte_changes_digest(tmp_path):
    _make_tree(tmp_path, ["config.json", "model.safetensors"])
    before = build_manifest(tmp_path).digest()
    data = bytearray((tmp_path / "model.safetensors").read_bytes())
    data[1000] ^= 1
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    assert build_manifest(tmp_path).digest() != before


def test_work_files_are_not_part_of_a_model(tmp_path):
    _make_tree(tmp_path, ["config.json"])
    (tmp_path / ".docparser-lock").write_bytes(b"")
    (tmp_path / ".docparser-partial").mkdir()
    (tmp_path / ".docparser-partial" / "x.bin").write_bytes(b"x")
    assert [f.path for f in build_manifest(tmp_path).files] == ["config.json"]


def test_round_trip_and_canonical_bytes(tmp_path):
    _make_tree(tmp_path, ["config.json", "tokenizer/vocab.txt"])
    manifest = build_manifest(tmp_path)
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest
    pretty = json.dumps(json.loads(manifest.to_bytes()), indent=2).encode()
    assert Manifest.from_bytes(pretty) == manifest  # parses, but digest is of canonical bytes
    assert hashlib.sha256(pretty).hexdigest() != manifest.digest()


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/abs", "a/../b", "a/./b", "a//b", "a\\b", "", ".", "a/"]
)
def test_unsafe_paths_are_rejected(path):
    assert not is_safe_relative_path(path)
    doc = {"format": 1, "files": [{"path": path, "size": 1, "sha256": "0" * 64}]}
    with pytest.raises(WeightsError):
        Manifest.from_bytes(json.dumps(doc).encode())


@pytest.mark.parametrize(
    "files",
    [
        [
            {"path": "a", "size": 1, "sha256": "0" * 64},
            {"path": "a", "size": 1, "sha256": "1" * 64},
        ],
        [{"path": "a", "size": -1, "sha256": "0" * 64}],
        [{"path": "a", "size": 1, "sha256": "xyz"}],
        [{"path": MANIFEST_NAME, "size": 1, "sha256": "0" * 64}],
        "not a list",
    ],
)
def test_malformed_manifests_are_rejected(files):
    with pytest.raises(WeightsError):
        Manifest.from_bytes(json.dumps({"format": 1, "files": files}).encode())


def test_malformed_json_and_format_rejected():
    with pytest.raises(WeightsError):
        Manifest.from_bytes(b"{not json")
    with pytest.raises(WeightsError):
        Manifest.from_bytes(b'{"format": 2, "files": []}')


def test_normalize_sha256():
    value = "AB" * 32
    assert normalize_sha256(f"sha256:{value}") == value.lower()
    assert normalize_sha256(f" {value}\n") == value.lower()
    with pytest.raises(WeightsError):
        normalize_sha256("abc")


def test_from_entries_sorts():
    entries = [ManifestEntry("b", 1, "1" * 64), ManifestEntry("a", 2, "2" * 64)]
    assert [e.path for e in Manifest.from_entries(entries).files] == ["a", "b"]
