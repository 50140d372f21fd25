"""verify: serve refuses weights that do not match their manifest."""

from __future__ import annotations

import logging

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
