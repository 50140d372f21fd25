"""`kubectl docparser ...`: the `kubectl-docparser` entry point installed with the operator
package, found by kubectl on PATH. It is `docparser-operator`'s code, and honours what a kubectl
plugin must: `--kubeconfig`, `--context` and the context's namespace (no `-n` needed).

kubectl itself runs the plugin when the control plane's kubectl is built (tests/controlplane
builds it with the node binaries); otherwise the entry point gets the same words kubectl would
pass it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from controlplane.harness import binaries_dir
from docparser_operator.api.kinds import DOCPARSER
from dp_helpers import CANARY_WEIGHTS, create, docparser, spec_of
from kube_cluster import Cluster, wait_for

BIN = Path(sys.executable).parent


def plugin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    kubectl = binaries_dir() / "kubectl"
    command = (
        [str(kubectl), "docparser", *args]
        if os.access(kubectl, os.X_OK)
        else [str(BIN / "kubectl-docparser"), *args]
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=env)


def two_contexts(cluster: Cluster, path: Path) -> Path:
    """The test cluster's kubeconfig with two contexts: `ocr` (the test's namespace, current)
    and `elsewhere` (another namespace)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    base = config["contexts"][0]["context"]
    config["contexts"] = [
        {"name": "ocr", "context": {**base, "namespace": cluster.namespace}},
        {"name": "elsewhere", "context": {**base, "namespace": "elsewhere"}},
    ]
    config["current-context"] = "ocr"
    path.write_text(yaml.safe_dump(config))
    return path


def test_kubectl_docparser_status_in_the_contexts_namespace(
    cluster: Cluster, operator: Any, tmp_path: Path
) -> None:
    assert shutil.which("kubectl-docparser", path=str(BIN)), "pip install ./operator puts it"
    create(cluster, docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 10}))
    wait_for("status", lambda: (cluster.get(DOCPARSER, "inv").get("status") or {}).get("canary"))
    kubeconfig = two_contexts(cluster, tmp_path / "kubeconfig")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

    shown = plugin("status", "inv", env={**env, "KUBECONFIG": str(kubeconfig)})
    assert shown.returncode == 0, shown.stderr
    assert f"DocParser {cluster.namespace}/inv" in shown.stdout
    assert "canary  2026-03-01" in shown.stdout and "conditions:" in shown.stdout

    env.pop("KUBECONFIG", None)
    flags = ("--kubeconfig", str(kubeconfig))
    elsewhere = plugin("status", "inv", *flags, "--context", "elsewhere", env=env)
    assert elsewhere.returncode == 2 and "elsewhere/inv not found" in elsewhere.stderr
    unknown = plugin("status", "inv", *flags, "--context", "nope", env=env)
    assert unknown.returncode == 2 and "context 'nope'" in unknown.stderr

    moved = plugin("set-weight", "inv", "25", *flags, env=env)
    assert moved.returncode == 0, moved.stderr
    assert spec_of(cluster, "inv")["canary"]["weight"] == 25
