"""verify: serve refuses weights that do not match their manifest."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys

import pytest
from docparser_runtime.errors import WeightsError
from docparser_runtime.settings import Settings
from docparser_runtime.weights.manifest import MANIFEST_NAME, write_manifest
from docparser_runtime.weights.verify import check_serving_weights, verify_weights


@pytest.fixture
def model_dir(tmp_path):
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_bytes(b'{"a": 1}')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 4096)
    (root / "sub" / "tok.json").write_bytes(b"[1, 2, 3]")
    write_manifest(root)
    return root


def test_intact_directory_verifies(model_dir):
    manifest = verify_weights(model_dir)
    assert verify_weights(model_dir, sha256=manifest.digest().upper()) == manifest


def test_no_manifest_is_unverified(model_dir):
    (model_dir / MANIFEST_NAME).unlink()
    with pytest.raises(WeightsError, match="unverified"):
        verify_weights(model_dir)


def test_pinned_digest_mismatch(model_dir):
    with pytest.raises(WeightsError, match="expected"):
        verify_weights(model_dir, sha256="0" * 64)


def test_flipped_byte_names_the_file(model_dir):
    path = model_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=r"sha256 mismatch for model\.safetensors"):
        verify_weights(model_dir)


def test_truncated_missing_and_extra_files(model_dir):
    (model_dir / "sub" / "tok.json").write_bytes(b"[1]")
    with pytest.raises(WeightsError, match=r"size mismatch for sub/tok\.json"):
        verify_weights(model_dir)
    (model_dir / "sub" / "tok.json").unlink()
    with pytest.raises(WeightsError, match=r"missing file sub/tok\.json"):
        verify_weights(model_dir)
    (model_dir / "sub" / "tok.json").write_bytes(b"[1, 2, 3]")
    verify_weights(model_dir)
    (model_dir / "evil.py").write_bytes(b"import os")
    with pytest.raises(WeightsError, match=r"file not in manifest: evil\.py"):
        verify_weights(model_dir)


def test_serve_gate(model_dir, caplog):
    assert check_serving_weights(Settings(engine="rapidocr", model_path=model_dir)) is None
    ok = check_serving_weights(Settings(engine="deepseek-ocr2", model_path=model_dir))
    assert ok is not None and len(ok.files) == 3
    pinned = Settings(engine="deepseek-ocr2", model_path=model_dir, weights_sha256=ok.digest())
    assert check_serving_weights(pinned) == ok
    # A pinned digest is checked for any engine: mounted weights are verified where they lie.
    rapid = Settings(engine="rapidocr", model_path=model_dir, weights_sha256=ok.digest())
    assert check_serving_weights(rapid) == ok
    with pytest.raises(WeightsError, match="expected"):
        check_serving_weights(rapid.model_copy(update={"weights_sha256": "0" * 64}))

    (model_dir / MANIFEST_NAME).unlink()
    with pytest.raises(WeightsError):
        check_serving_weights(Settings(engine="deepseek-ocr2", model_path=model_dir))
    relaxed = Settings(engine="deepseek-ocr2", model_path=model_dir, allow_unverified_weights=True)
    with caplog.at_level(logging.WARNING):
        assert check_serving_weights(relaxed) is None
    assert "UNVERIFIED" in caplog.text


def test_missing_directory(tmp_path):
    with pytest.raises(WeightsError, match="not found"):
        check_serving_weights(Settings(engine="deepseek-ocr2", model_path=tmp_path / "nope"))


CLI = [sys.executable, "-m", "docparser_runtime.cli"]


def test_serve_refuses_unverified_weights_via_cli(model_dir):
    (model_dir / "config.json").write_bytes(b'{"a": 2}')  # changed after the manifest
    result = subprocess.run(
        [*CLI, "serve", "--engine", "deepseek-ocr2", "--model-path", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "weights_error" in result.stderr and "config.json" in result.stderr


def test_make_manifest_cli_prints_the_crd_digest(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"weights")
    result = subprocess.run(
        [*CLI, "make-manifest", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    digest = result.stdout.strip()
    assert digest == hashlib.sha256((tmp_path / MANIFEST_NAME).read_bytes()).hexdigest()
    assert verify_weights(tmp_path, sha256=digest).files[0].path == "w.bin"
    missing = subprocess.run(
        [*CLI, "make-manifest", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 1 and "not a directory" in missing.stderr
