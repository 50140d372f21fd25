"""pytest wiring for the real control plane: the session fixture `real_apiserver` and report lines.

WHY a plugin (registered by tests/conftest.py): the fixture is shared by the operator suites
and the realcluster tests, and the report header/summary must say which backend actually ran,
so a skipped real server is never mistaken for a pass against it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from .harness import (
    KUBE_VERSION,
    ControlPlane,
    ControlPlaneUnavailable,
    binaries_dir,
    missing_binaries,
    start_control_plane,
)
from .kubeapi import KubeApi, KubeApiError

_session: dict[str, object] = {}
_worker_lines: list[str] = []  # on the xdist controller: each worker's backend line


def pytest_report_header(config: pytest.Config) -> str:
    missing = missing_binaries()
    if missing:
        return (
            f"control plane: kubernetes {KUBE_VERSION} NOT built ({', '.join(missing)} missing in "
            f"{binaries_dir()}): realcluster tests skip; run `bash hack/controlplane/build.sh`"
        )
    return f"control plane: kubernetes {KUBE_VERSION} binaries in {binaries_dir()}"


@pytest.fixture(scope="session")
def real_apiserver() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (+ kube-controller-manager), CRDs installed, for the session."""
    start = time.monotonic()
    try:
        with start_control_plane() as cp:
            _session["started"] = time.monotonic() - start
            _session["control_plane"] = cp
            yield cp
    except ControlPlaneUnavailable as exc:
        _session["skipped"] = str(exc)
        pytest.skip(f"real kube-apiserver unavailable: {exc}")


@pytest.fixture
def real_api(real_apiserver: ControlPlane) -> Iterator[KubeApi]:
    """An admin client (system:masters) for one test."""
    with real_apiserver.api() as api:
        yield api


@pytest.fixture
def real_namespace(real_api: KubeApi) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (emptied by the namespace controller)."""
    name = f"t-{os.urandom(4).hex()}"
    real_api.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    try:
        real_api.delete(f"/api/v1/namespaces/{name}")
    except KubeApiError as exc:
        if exc.status_code != 404:
            raise


def _summary() -> str | None:
    """This process's line on the backend that ran (None when no test asked for it)."""
    cp = _session.get("control_plane")
    if isinstance(cp, ControlPlane):
        kcm = "with kube-controller-manager" if cp.controller_manager else "without controllers"
        return (
            f"backend: real kube-apiserver {cp.version} + etcd ({kcm}), ready in "
            f"{_session['started']:.1f}s, CRDs: {len(cp.installed_crds)}"
        )
    if "skipped" in _session:
        return f"backend: real kube-apiserver SKIPPED: {_session['skipped']}"
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist each worker starts its own control plane: its line goes back to the
    controller (``workeroutput``), which prints them all."""
    output = getattr(session.config, "workeroutput", None)
    line = _summary()
    if output is not None and line:
        output["control_plane_summary"] = line


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerLines(), "controlplane-worker-lines")


class _WorkerLines:
    """Collects the workers' backend lines on the xdist controller."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        line = (getattr(node, "workeroutput", None) or {}).get("control_plane_summary")
        if line:
            _worker_lines.append(str(line))


def pytest_terminal_summary(terminalreporter) -> None:
    for line in [_summary(), *_worker_lines]:
        if line:
            terminalreporter.write_line(line)
