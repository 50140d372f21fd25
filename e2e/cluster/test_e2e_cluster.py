"""End to end on a real cluster (opt-in): ``DOCPARSER_E2E_KUBECONFIG=/path`` plus an
operator already running there (``helm install charts/docparser-operator``).

It applies ``examples/rapidocr-minimal.yaml`` into a fresh namespace, waits for
``Ready=True`` with the condition shape Argo CD and Flux read (kstatus), shifts nothing
(no canary on the CPU example) and deletes the namespace. Without the variable the test
is skipped with this explanation; CI never reaches a cluster.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUBECONFIG = os.environ.get("DOCPARSER_E2E_KUBECONFIG")

pytestmark = pytest.mark.skipif(
    not KUBECONFIG,
    reason="set DOCPARSER_E2E_KUBECONFIG to a cluster running the operator to run this suite",
)


def kubectl(*args: str, stdin: str | None = None, timeout: float = 60) -> str:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", KUBECONFIG, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return out.stdout


def test_docparser_becomes_ready_and_is_cleaned_up():
    ns = f"docparser-e2e-{uuid.uuid4().hex[:6]}"
    manifest = yaml.safe_load((REPO / "examples" / "rapidocr-minimal.yaml").read_text())
    manifest["metadata"]["namespace"] = ns
    kubectl("create", "namespace", ns)
    try:
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
        name = manifest["metadata"]["name"]
        deadline = time.monotonic() + 900
        ready = None
        while time.monotonic() < deadline:
            obj = yaml.safe_load(kubectl("-n", ns, "get", "docparser", name, "-o", "yaml"))
            status = obj.get("status") or {}
            conds = {c["type"]: c for c in status.get("conditions") or []}
            if (
                conds.get("Ready", {}).get("status") == "True"
                and status.get("observedGeneration") == obj["metadata"]["generation"]
            ):
                ready = status
                break
            time.sleep(5)
        assert ready is not None, "DocParser did not become Ready within 15 minutes"
        assert ready["endpoint"].startswith(f"http://{name}.{ns}.svc")
        assert ready["stable"]["readyReplicas"] >= 1
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")
