"""``wait-weights``: a pod mounting the weights cache waits for the fill Job's atomic rename
(the manifest appears last), and gives up with a clear error after its timeout."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from docparser_runtime.errors import WeightsError
from docparser_runtime.weights.manifest import MANIFEST_NAME
from docparser_runtime.weights.wait import wait_for_weights


def test_returns_once_the_manifest_appears(tmp_path: Path) -> None:
    model = tmp_path / "v1"

    def fill() -> None:
        time.sleep(0.3)
        staged = tmp_path / "v1.part"
        staged.mkdir()
        (staged / MANIFEST_NAME).write_text("{}")
        staged.rename(model)  # what fetch-weights does once every file verified

    filler = threading.Thread(target=fill)
    filler.start()
    started = time.monotonic()
    wait_for_weights(model, timeout_s=10, poll_s=0.05)
    filler.join()
    assert time.monotonic() - started >= 0.25
    assert (model / MANIFEST_NAME).is_file()


def test_times_out_naming_the_fill_job() -> None:
    clock = iter(range(0, 1000, 10))
    with pytest.raises(WeightsError) as info:
        wait_for_weights(
            Path("/nonexistent/v1"),
            timeout_s=60,
            clock=lambda: float(next(clock)),
            sleep=lambda _s: None,
        )
    assert "after 60s" in info.value.message and "fill Job" in info.value.message


def test_cli_exit_codes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "docparser_runtime", "wait-weights", "--dir", str(tmp_path)]
    missing = subprocess.run([*cmd, "--timeout", "0.2"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "wait-weights: weights_error" in missing.stderr
    (tmp_path / MANIFEST_NAME).write_text("{}")
    present = subprocess.run([*cmd, "--timeout", "5"], capture_output=True, text=True, timeout=60)
    assert present.returncode == 0, present.stderr
