"""`docparser-operator render -f` as users run it: a real process, YAML stream on stdout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docparser_operator.cli.main import build_parser, main, render_resource

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
INVALID = REPO / "tests" / "operator" / "invalid"
CLI = [sys.executable, "-m", "docparser_operator"]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_render_prints_every_child_as_a_yaml_stream() -> None:
    path = EXAMPLES / "deepseek-gateway-canary.yaml"
    result = _run("render", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("---\n")
    documents = list(yaml.safe_load_all(result.stdout))
    assert documents == render_resource(yaml.safe_load(path.read_text()))
    assert "&id" not in result.stdout and "*id" not in result.stdout


def test_multi_document_file_and_other_kinds(tmp_path: Path, capsys) -> None:
    stream = tmp_path / "all.yaml"
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: ocr-keys}\nstringData: {a: b}\n"
    stream.write_text(
        "\n---\n".join(
            [
                (EXAMPLES / "rapidocr-minimal.yaml").read_text(),
                secret,
                (EXAMPLES / "deepseek-service-router.yaml").read_text(),
            ]
        )
    )
    result = _run("render", "-f", str(stream))
    assert result.returncode == 0, result.stderr
    instances = {
        d["metadata"]["labels"]["app.kubernetes.io/instance"]
        for d in yaml.safe_load_all(result.stdout)
    }
    assert instances == {"receipts", "contracts"}
    assert "skipped document 1: kind Secret" in result.stderr


def test_stdin_and_canary_not_ready() -> None:
    text = (EXAMPLES / "deepseek-gateway-canary.yaml").read_text()
    result = _run("render", "-f", "-", "--canary-not-ready", stdin=text)
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    (route,) = [d for d in documents if d["kind"] == "HTTPRoute"]
    roles = {
        d["metadata"]["name"]: d["metadata"]["labels"]["docparser.io/track"]
        for d in documents
        if d["kind"] == "Deployment"
    }
    weights = {roles[b["name"]]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
    assert weights == {"stable": 100, "canary": 0}


def test_invalid_spec_exits_2_with_the_crd_message() -> None:
    result = _run("render", "-f", str(INVALID / "replicas-min-above-max.yaml"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "DocParser bad" in result.stderr
    assert "replicas.min must be less than or equal to replicas.max" in result.stderr


def test_missing_file_exits_2(capsys) -> None:
    assert main(["render", "-f", "/nonexistent/docparser.yaml"]) == 2
    assert "error:" in capsys.readouterr().err


def test_run_subcommand_takes_repeatable_namespaces(capsys) -> None:
    args = build_parser().parse_args(["run", "--namespace", "ocr", "--namespace", "batch"])
    assert args.namespace == ["ocr", "batch"]
    assert build_parser().parse_args(["run"]).namespace is None
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0 and "--namespace" in capsys.readouterr().out
