"""A model that cannot load makes `serve` exit non-zero and say why (DESIGN: honest failure).

Kubernetes restarts the container and shows the termination message; the operator reports it
as FailedToLoad. Both failure points run in a real `docparser-runtime serve` process: weights
refused before the server starts, and an engine whose load raises once the server is up.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SERVE = [sys.executable, "-m", "docparser_runtime", "serve", "--host", "127.0.0.1"]


def _port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _serve(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    log = tmp_path / "termination-log"
    env = {
        **os.environ,
        "DOCPARSER_TERMINATION_LOG": str(log),
        "DOCPARSER_DECODE_WORKERS": "0",
        "DOCPARSER_JOB_WORKERS": "0",
    }
    proc = subprocess.run(
        [*SERVE, "--port", _port(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    message = log.read_text() if log.exists() else ""
    return proc.returncode, message, proc.stderr


def test_unverified_weights_exit_1_with_the_reason(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    code, message, _ = _serve(tmp_path, "--engine", "deepseek-ocr2", "--model-path", str(model))
    assert code == 1
    assert message.startswith("serve: weights_error:")


@pytest.mark.slow  # a serve process that imports torch and transformers
def test_engine_that_cannot_load_exits_1_instead_of_idling(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="the deepseek extra (make install-test)")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    code, message, stderr = _serve(
        tmp_path,
        "--engine",
        "deepseek-ocr2",
        "--model-path",
        str(model),
        "--allow-unverified-weights",
    )
    assert code == 1, stderr[-2000:]
    assert message.startswith("serve: engine failed to load:"), (message, stderr[-2000:])
