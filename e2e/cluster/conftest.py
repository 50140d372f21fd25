"""The cluster the e2e/cluster scenarios run on.

- `DOCPARSER_E2E_KUBECONFIG=/path`: any cluster already running the operator (kind via
  `e2e/kind.sh`, or a real one); `DOCPARSER_E2E_RUNTIME_IMAGE` names the runtime image there.
- Otherwise the local cluster (`make cluster-up`, 3 nodes unless DOCPARSER_CLUSTER_NODES says
  otherwise): reused when it runs, else started for the session and stopped after it. When
  it cannot run here (not root, binaries or images not built by `make test`'s one-time
  steps) every scenario skips and says why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import REPO, Target, delete_weights_volume, record

HACK = REPO / "hack"
sys.path.insert(0, str(HACK))  # the local cluster's package lives with the control plane

from controlplane.harness import binaries_dir  # noqa: E402
from controlplane.localcluster.__main__ import DEFAULT_ROOT, preflight  # noqa: E402
from controlplane.localcluster.configs import Layout  # noqa: E402
from controlplane.localcluster.supervisor import load_state  # noqa: E402

RUNTIME_IMAGE = "docparser/runtime:dev"


def _images_built() -> str | None:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_images.py"), "--check"],
        capture_output=True,
        text=True,
    )
    return None if out.returncode == 0 else (out.stdout + out.stderr).strip()[-500:]


def _cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.localcluster", *args],
        cwd=HACK,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Target]:
    kubeconfig = os.environ.get("DOCPARSER_E2E_KUBECONFIG")
    if kubeconfig:
        kubectl = os.environ.get("KUBECTL") or "kubectl"
        local = Path(kubeconfig).resolve() == Layout(DEFAULT_ROOT).admin_kubeconfig.resolve()
        yield Target(
            Path(kubeconfig),
            kubectl,
            os.environ.get("DOCPARSER_E2E_RUNTIME_IMAGE", RUNTIME_IMAGE),
            local,  # the local cluster named by its kubeconfig: its pause image is there
        )
        return
    problems = preflight()
    if problems:
        pytest.skip("local cluster cannot run here: " + "; ".join(problems))
    not_built = _images_built()
    if not_built:
        pytest.skip(f"local cluster images not built (make cluster-images): {not_built}")
    layout = Layout(DEFAULT_ROOT)
    state = load_state(layout)
    started_here = not (state and state.phase == "running")
    # Three nodes by default (DOCPARSER_CLUSTER_NODES): every scenario, single- and multi-node,
    # shares this one cluster; each node imports the images, so allow for three imports.
    up = _cli("up", "--timeout", "600", timeout=900)
    if up.returncode != 0:
        if started_here:
            _cli("down", timeout=120)
        pytest.fail(f"make cluster-up failed:\n{up.stdout[-2000:]}\n{up.stderr[-3000:]}")
    print(up.stdout)
    for line in up.stdout.splitlines():  # how long the shared cluster took, for the report
        if " in " in line and line.startswith("cluster-up:"):
            record("cluster-up", line.removeprefix("cluster-up: "))
    try:
        yield Target(layout.admin_kubeconfig, str(binaries_dir() / "kubectl"), RUNTIME_IMAGE, True)
    finally:
        if started_here:
            down = _cli("down", timeout=180)
            print(down.stdout, down.stderr)


@pytest.fixture
def namespace(cluster: Target) -> Iterator[str]:
    """A fresh namespace per scenario, deleted afterwards without waiting: its pods drain
    (preStop, grace period) while the next scenario runs; cluster-down removes what is left."""
    ns = f"e2e-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    try:
        yield ns
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        delete_weights_volume(cluster, ns)
