"""fetch-weights against real sources: file://, a mounted path, a local HTTP server, S3."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from docparser_runtime.errors import WeightsError
from docparser_runtime.weights.fetch import fetch_weights
from docparser_runtime.weights.manifest import MANIFEST_NAME, build_manifest, write_manifest
from docparser_runtime.weights.verify import verify_weights

CLI = Path(sys.executable).with_name("docparser-runtime")


class _LoggingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory (no Range support, like many simple servers) and logs paths."""

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()

    def do_HEAD(self):
        self.server.requests.append("HEAD " + self.path)
        super().do_HEAD()


@pytest.fixture
def model_src(tmp_path):
    """A model directory with its manifest, as a weights source."""
    root = tmp_path / "src"
    (root / "tokenizer").mkdir(parents=True)
    (root / "config.json").write_bytes(b'{"model_type": "deepseek_ocr2"}')
    (root / "model.safetensors").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (root / "tokenizer" / "vocab.txt").write_bytes(b"hello\nworld\n")
    (root / "empty.bin").write_bytes(b"")
    manifest = write_manifest(root)
    return root, manifest.digest()


@pytest.fixture
def http_src(model_src):
    root, digest = model_src
    handler = functools.partial(_LoggingHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/", root, digest, server.requests
    finally:
        server.shutdown()
        server.server_close()


def _assert_same_tree(dest: Path, src: Path):
    assert build_manifest(dest).to_bytes() == build_manifest(src).to_bytes()
    assert (dest / MANIFEST_NAME).read_bytes() == (src / MANIFEST_NAME).read_bytes()
    assert not list(dest.parent.glob(f".{dest.name}.partial")), "partial dir left behind"


def test_file_uri_and_plain_path(model_src, tmp_path):
    src, digest = model_src
    fetch_weights(src.as_uri(), tmp_path / "a" / "model", sha256=digest, manifest=None)
    _assert_same_tree(tmp_path / "a" / "model", src)
    fetch_weights(str(src), tmp_path / "b", sha256=digest, manifest=None)
    _assert_same_tree(tmp_path / "b", src)
    assert verify_weights(tmp_path / "b", sha256=digest).digest() == digest


def test_http_fetch_then_noop(http_src, tmp_path):
    url, src, digest, requests = http_src
    dest = tmp_path / "models" / "ocr"
    fetch_weights(url, dest, sha256=digest, manifest=None)
    _assert_same_tree(dest, src)
    fetched = {p for p in requests if not p.startswith("HEAD")}
    assert fetched == {
        "/" + MANIFEST_NAME,
        "/config.json",
        "/model.safetensors",
        "/tokenizer/vocab.txt",
        "/empty.bin",
    }
    requests.clear()
    fetch_weights(url, dest, sha256=digest, manifest=None)
    assert requests == [], "a verified destination must not be downloaded again"


def test_wrong_pinned_digest_fails_before_downloading(http_src, tmp_path):
    url, _src, _digest, requests = http_src
    with pytest.raises(WeightsError, match=MANIFEST_NAME):
        fetch_weights(url, tmp_path / "d", sha256="ab" * 32, manifest=None)
    assert [p for p in requests if not p.startswith("HEAD")] == ["/" + MANIFEST_NAME]
    assert not (tmp_path / "d").exists()


def test_tampered_file_is_named(http_src, tmp_path):
    url, src, digest, _ = http_src
    path = src / "tokenizer" / "vocab.txt"
    path.write_bytes(path.read_bytes().replace(b"world", b"WORLD"))  # same size
    with pytest.raises(WeightsError, match=r"sha256 mismatch for tokenizer/vocab\.txt"):
        fetch_weights(url, tmp_path / "d", sha256=digest, manifest=None)
    assert not (tmp_path / "d").exists()


def test_missing_file_is_named(http_src, tmp_path):
    url, src, digest, _ = http_src
    (src / "config.json").unlink()
    with pytest.raises(WeightsError, match=r"missing file config\.json"):
        fetch_weights(url, tmp_path / "d", sha256=digest, manifest=None)
    with pytest.raises(WeightsError, match=r"missing file config\.json"):
        fetch_weights(str(src), tmp_path / "e", sha256=digest, manifest=None)


def test_resume_after_killed_run(http_src, tmp_path):
    """A killed run leaves a partial dir: verified files are kept, the rest re-fetched."""
    url, src, digest, requests = http_src
    dest = tmp_path / "model"
    partial = tmp_path / ".model.partial"
    (partial / "tokenizer").mkdir(parents=True)
    shutil.copy(src / "model.safetensors", partial / "model.safetensors")  # complete, good
    (partial / "tokenizer" / "vocab.txt").write_bytes(b"hellX\nworld\n")  # right size, bad
    (partial / "config.json.part").write_bytes(b'{"model_ty')  # interrupted mid-file
    (partial / "stray.bin").write_bytes(b"from an older version")
    fetch_weights(url, dest, sha256=digest, manifest=None)
    _assert_same_tree(dest, src)
    assert "/model.safetensors" not in requests, "a verified partial file was downloaded again"
    assert "/tokenizer/vocab.txt" in requests and "/config.json" in requests
    assert not partial.exists()


def test_replaces_an_older_version_atomically(model_src, tmp_path):
    src, digest = model_src
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "old-weights.bin").write_bytes(b"old")
    write_manifest(dest)
    fetch_weights(str(src), dest, sha256=digest, manifest=None)
    _assert_same_tree(dest, src)
    assert not (tmp_path / ".model.old").exists()


def test_corrupted_destination_is_refetched(model_src, tmp_path):
    src, digest = model_src
    dest = tmp_path / "model"
    fetch_weights(str(src), dest, sha256=digest, manifest=None)
    (dest / "config.json").write_bytes(b'{"model_type": "deepseek_ocr3"}')
    fetch_weights(str(src), dest, sha256=digest, manifest=None)
    _assert_same_tree(dest, src)


def test_local_manifest_pins_the_files(model_src, tmp_path):
    src, _digest = model_src
    pinned = tmp_path / "pinned.json"
    shutil.copy(src / MANIFEST_NAME, pinned)
    fetch_weights(str(src), tmp_path / "d", sha256=None, manifest=pinned)
    _assert_same_tree(tmp_path / "d", src)
    with pytest.raises(WeightsError, match="does not match"):
        fetch_weights(str(src), tmp_path / "e", sha256="cd" * 32, manifest=pinned)
    with pytest.raises(WeightsError, match="cannot read manifest"):
        fetch_weights(str(src), tmp_path / "e", sha256=None, manifest=tmp_path / "absent.json")


def test_unpinned_fetch_still_checks_files(model_src, tmp_path):
    src, _digest = model_src
    fetch_weights(src.as_uri(), tmp_path / "d", sha256=None, manifest=None)
    _assert_same_tree(tmp_path / "d", src)
    (src / "empty.bin").write_bytes(b"not empty")
    with pytest.raises(WeightsError, match=r"empty\.bin"):
        fetch_weights(src.as_uri(), tmp_path / "e", sha256=None, manifest=None)


def test_unsupported_scheme(tmp_path):
    with pytest.raises(WeightsError, match="pvc"):
        fetch_weights("pvc://claim/models", tmp_path / "d", sha256="ab" * 32, manifest=None)
    with pytest.raises(WeightsError):
        fetch_weights("nosuch://x/y", tmp_path / "d", sha256="ab" * 32, manifest=None)


@pytest.mark.skipif(not CLI.exists(), reason="docparser-runtime console script not installed")
def test_cli_exit_codes(http_src, tmp_path):
    url, src, digest, _ = http_src
    ok = subprocess.run(
        [CLI, "fetch-weights", "--source", url, "--dest", tmp_path / "d", "--sha256", digest],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    _assert_same_tree(tmp_path / "d", src)

    (src / "model.safetensors").write_bytes(b"truncated")
    bad = subprocess.run(
        [CLI, "fetch-weights", "--source", url, "--dest", tmp_path / "e", "--sha256", digest],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0
    assert "model.safetensors" in bad.stderr
    assert not (tmp_path / "e").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_s3_through_local_s3_server(model_src, tmp_path, monkeypatch):
    """s3:// via s3fs against moto's S3-compatible server on 127.0.0.1.

    s3fs (through aiobotocore/botocore) pins python-dateutil<3 while the operator's
    kubernetes==37 client needs python-dateutil>=3, so the two cannot share the test venv;
    this test runs where s3fs and moto are installed (see docs) and skips otherwise.
    """
    pytest.importorskip("s3fs", reason="s3fs not installed (conflicts with kubernetes==37)")
    moto_server = pytest.importorskip("moto.server", reason="moto[server] not installed")
    import boto3

    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="models")
        src, digest = model_src
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            s3.upload_file(str(path), "models", f"ocr2/{path.relative_to(src).as_posix()}")
        opts = {"client_kwargs": {"endpoint_url": endpoint}}
        fetch_weights(
            "s3://models/ocr2", tmp_path / "d", sha256=digest, manifest=None, storage_options=opts
        )
        _assert_same_tree(tmp_path / "d", src)
        s3.delete_object(Bucket="models", Key="ocr2/config.json")
        with pytest.raises(WeightsError, match=r"missing file config\.json"):
            fetch_weights(
                "s3://models/ocr2",
                tmp_path / "e",
                sha256=digest,
                manifest=None,
                storage_options=opts,
            )
    finally:
        server.stop()


def test_digest_is_sha256_of_manifest_file(model_src):
    src, digest = model_src
    assert hashlib.sha256((src / MANIFEST_NAME).read_bytes()).hexdigest() == digest


def test_destination_that_is_a_mount_point(model_src, tmp_path, monkeypatch):
    """An emptyDir/PVC mount point cannot be renamed: files are staged inside it."""
    src, digest = model_src
    dest = tmp_path / "mnt"
    (dest / "lost+found").mkdir(parents=True)
    (dest / "stale.bin").write_bytes(b"previous model")
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == dest or real_ismount(p))
    fetch_weights(str(src), dest, sha256=digest, manifest=None)
    assert not (dest / "stale.bin").exists() and (dest / "lost+found").is_dir()
    assert not (dest / ".docparser-partial").exists()
    assert (dest / ".docparser-lock").exists() and not (tmp_path / ".mnt.lock").exists()
    assert verify_weights(dest, sha256=digest).digest() == digest  # work files ignored
    fetch_weights(str(src), dest, sha256=digest, manifest=None)  # verified: no-op


def test_concurrent_fetches_into_one_dest_download_once(http_src, tmp_path):
    """Two pods sharing a volume: the lock makes the second find verified weights."""
    url, src, digest, requests = http_src
    dest = tmp_path / "volume" / "model"
    errors = []

    def run():
        try:
            fetch_weights(url, dest, sha256=digest, manifest=None)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    _assert_same_tree(dest, src)
    gets = [p for p in requests if p == "/model.safetensors"]
    assert gets == ["/model.safetensors"], "the weights were downloaded twice"
