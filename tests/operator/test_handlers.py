"""handlers.py through its real entry point: `docparser-operator run` as a separate process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from docparser_operator.apply import KNOWN_KINDS
from dp_helpers import condition, create, docparser, revision_in, role_deployment
from kube_cluster import Cluster, wait_for

DEPLOY = KNOWN_KINDS["Deployment"]


@pytest.mark.slow
def test_cli_run_reconciles_and_stops_cleanly(cluster: Cluster, tmp_path: Path) -> None:
    """Credentials from KUBECONFIG, one namespace, SIGTERM -> clean exit."""
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "DOCPARSER_OPERATOR_RESYNC_INTERVAL_S": "2",
    }
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "docparser_operator", "run", "--namespace", cluster.namespace],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        create(cluster, docparser("cli"))
        wait_for("deployment", lambda: role_deployment(cluster, "cli"), timeout=60)
        wait_for("status", lambda: condition(cluster, "cli", "Progressing"), timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
        log.close()
    assert code == 0, (tmp_path / "operator.log").read_text()[-3000:]


def test_operator_ignores_other_namespaces(cluster: Cluster, operator: object) -> None:
    if cluster.backend != "emulator":
        pytest.skip("needs a second namespace the fixture does not clean up")
    cluster.client.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}
    )
    other = docparser("other")
    other["metadata"]["namespace"] = "elsewhere"
    cluster.client.apply(other, manager="gitops")
    create(cluster, docparser("mine"))
    wait_for("own namespace reconciled", lambda: role_deployment(cluster, "mine"))
    assert cluster.client.get(DEPLOY, "elsewhere", f"other-{revision_in(other)}") is None
    assert cluster.client.list(DEPLOY, "elsewhere") == []


def test_clusterwide_operator_reconciles_any_namespace(cluster: Cluster) -> None:
    from operator_runner import running_operator

    with running_operator(cluster, clusterwide=True):
        create(cluster, docparser("wide"))
        wait_for("reconciled", lambda: condition(cluster, "wide", "Progressing"))
        assert role_deployment(cluster, "wide") is not None
