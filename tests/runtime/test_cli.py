"""docparser-runtime CLI: argument parsing, flag/env precedence, real process exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from docparser_runtime import cli

PYTHON = sys.executable


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "docparser_runtime", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_serve_flags_override_environment(monkeypatch):
    monkeypatch.setenv("DOCPARSER_PORT", "9999")
    monkeypatch.setenv("DOCPARSER_ENGINE", "deepseek-ocr2")
    monkeypatch.setenv("DOCPARSER_MAX_BATCH_SIZE", "3")
    args = cli._build_parser().parse_args(
        ["serve", "--engine", "rapidocr", "--port", "1234", "--model-path", "/models/x"]
    )
    settings = cli._settings_from_args(args)
    assert settings.port == 1234
    assert settings.engine == "rapidocr"
    assert settings.model_path == Path("/models/x")
    assert settings.max_batch_size == 3  # no flag: the environment decides


def test_serve_without_flags_uses_environment(monkeypatch):
    monkeypatch.setenv("DOCPARSER_HOST", "127.0.0.2")
    monkeypatch.delenv("DOCPARSER_PORT", raising=False)
    settings = cli._settings_from_args(cli._build_parser().parse_args(["serve"]))
    assert settings.host == "127.0.0.2"
    assert settings.port == 8000


def test_fetch_weights_arguments():
    args = cli._build_parser().parse_args(
        ["fetch-weights", "--source", "file:///w", "--dest", "/tmp/w", "--sha256", "ab" * 32]
    )
    assert (args.source, args.dest, args.sha256, args.manifest) == (
        "file:///w",
        Path("/tmp/w"),
        "ab" * 32,
        None,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--engine", "tesseract"],
        ["serve", "--port", "eighty"],
        ["fetch-weights", "--dest", "/tmp/w"],
        [
            "fetch-weights",
            "--source",
            "s3://b/m",
            "--dest",
            "/d",
            "--sha256",
            "a",
            "--manifest",
            "m",
        ],
        [],
    ],
)
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as info:
        cli._build_parser().parse_args(argv)
    assert info.value.code == 2


def test_module_entry_point_help_in_a_real_process():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "serve" in result.stdout and "fetch-weights" in result.stdout
    serve_help = run_cli("serve", "--help")
    for flag in ("--engine", "--model-path", "--host", "--port"):
        assert flag in serve_help.stdout


def test_console_script_rejects_unknown_engine():
    script = Path(PYTHON).with_name("docparser-runtime")
    result = subprocess.run(
        [str(script), "serve", "--engine", "nope"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
