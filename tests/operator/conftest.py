"""Fixtures of the operator suite: the `cluster` (three backends) and a running operator.

`cluster` is parametrised by backend so each integration test runs unchanged against
- the kmock-based emulator (always),
- a real kube-apiserver + etcd + kube-controller-manager from hack/controlplane (marked
  realcluster; skipped with the harness's reason when the binaries are not built),
- an existing cluster when ``DOCPARSER_TEST_KUBECONFIG`` names its kubeconfig (opt-in; the
  tests create and delete their own namespace and need the DocParser CRD installed; set
  ``DOCPARSER_TEST_KUBECONFIG_CONTROLLERS=0`` for a bare API server without controllers).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The operator under test resyncs every second (read when an operator run starts).
os.environ.setdefault("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "1")
os.environ.setdefault("DOCPARSER_OPERATOR_RESYNC_INITIAL_DELAY_S", "0.5")
os.environ.setdefault("DOCPARSER_OPERATOR_RETRY_DELAY_S", "0.5")

from gateway_sim import GatewayController
from kube_cluster import Cluster, emulator_cluster, proxied_cluster
from operator_runner import OperatorRun, running_operator

REAL_KUBECONFIG_ENV = "DOCPARSER_TEST_KUBECONFIG"
REAL_CONTROLLERS_ENV = "DOCPARSER_TEST_KUBECONFIG_CONTROLLERS"
logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def _backends() -> list:
    params = [
        pytest.param("emulator", id="emulator"),
        pytest.param("apiserver", id="apiserver", marks=pytest.mark.realcluster),
    ]
    if os.environ.get(REAL_KUBECONFIG_ENV):
        params.append(pytest.param("kubeconfig", id="kubeconfig", marks=pytest.mark.realcluster))
    return params


@pytest.fixture(params=_backends())
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    namespace = f"dp-{uuid.uuid4().hex[:8]}"
    backend = request.param
    if backend == "emulator":
        yield from emulator_cluster(tmp_path, namespace)
        return
    if backend == "apiserver":
        yield from _apiserver_cluster(request, tmp_path, namespace)
        return
    gen = proxied_cluster(backend, Path(os.environ[REAL_KUBECONFIG_ENV]), tmp_path, namespace)
    first = next(gen)
    # a real cluster runs its controllers; a bare API server can say so (=0)
    controllers = os.environ.get(REAL_CONTROLLERS_ENV, "1") != "0"
    first.has_garbage_collector = controllers
    first.has_controllers = controllers
    yield first
    yield from gen


def _apiserver_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> Iterator[Cluster]:
    control_plane = request.getfixturevalue("real_apiserver")
    gen = proxied_cluster("apiserver", Path(control_plane.kubeconfig), tmp_path, namespace)
    first = next(gen)
    first.has_garbage_collector = bool(control_plane.controller_manager)
    first.has_controllers = bool(control_plane.controller_manager)
    yield first
    yield from gen


@pytest.fixture
def real_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """The real API server backend alone (with its controllers), for scenarios the emulator
    cannot stage (Jobs, real runtime processes per track): they run there only."""
    yield from _apiserver_cluster(request, tmp_path, f"dp-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def operator(cluster: Cluster) -> Iterator[OperatorRun]:
    """The operator, and a Gateway controller that accepts every route generation (no
    backend runs one; the operator waits for its verdict: gateway_sim.py)."""
    with running_operator(cluster) as runner, GatewayController(cluster):
        yield runner
