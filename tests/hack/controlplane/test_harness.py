"""The harness itself: auth and RBAC are on, the kubeconfig works, nothing outlives a failure."""

from __future__ import annotations

import os
import subprocess

import pytest
from controlplane.harness import ControlPlane, ControlPlaneUnavailable, start_control_plane
from controlplane.kubeapi import KubeApiError
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

realcluster = pytest.mark.realcluster


@realcluster
def test_server_reports_the_pinned_version(real_apiserver: ControlPlane) -> None:
    with real_apiserver.api() as api:
        info = api.get("/version")
    assert info["gitVersion"] == real_apiserver.version
    assert info["minor"] == real_apiserver.version.split(".")[1]


@realcluster
def test_tokens_authenticate_and_rbac_authorizes(real_apiserver: ControlPlane) -> None:
    with real_apiserver.api(token="not-a-token") as stranger, pytest.raises(KubeApiError) as bad:
        stranger.get("/api/v1/namespaces")
    assert bad.value.status_code == 401

    with real_apiserver.api(token=real_apiserver.user_token) as user:
        with pytest.raises(KubeApiError) as denied:
            user.get("/api/v1/namespaces")
        assert denied.value.status_code == 403
        assert ControlPlane.USER_NAME in denied.value.body["message"]
        review = user.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert review["status"]["userInfo"]["username"] == ControlPlane.USER_NAME


@realcluster
def test_kubeconfig_works_with_the_kubernetes_client(real_apiserver: ControlPlane) -> None:
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(
        config_file=str(real_apiserver.kubeconfig), client_configuration=cfg
    )
    assert cfg.verify_ssl, "the kubeconfig must verify the server certificate"
    with k8s_client.ApiClient(cfg) as api_client:
        crds = k8s_client.ApiextensionsV1Api(api_client).list_custom_resource_definition()
    names = {crd.metadata.name for crd in crds.items}
    assert "docparsers.docparser.io" in names
    assert set(real_apiserver.installed_crds) <= names


@realcluster
def test_service_account_tokens_are_signed_with_the_harness_key(
    real_apiserver: ControlPlane,
) -> None:
    with real_apiserver.api() as api:
        ns = f"sa-{os.urandom(3).hex()}"
        api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        api.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "op"}})
        token = api.create(
            f"/api/v1/namespaces/{ns}/serviceaccounts/op/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )["status"]["token"]
        with real_apiserver.api(token=token) as sa:
            review = sa.create(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
        api.delete(f"/api/v1/namespaces/{ns}")
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:op"


def _alive(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return state.returncode == 0 and not state.stdout.strip().startswith("Z")


@realcluster
@pytest.mark.slow
def test_everything_is_stopped_and_removed_when_the_body_fails(
    real_apiserver: ControlPlane,
) -> None:
    """A second, private control plane: its processes and temp dir vanish after an exception."""
    pids: list[int] = []
    with (
        pytest.raises(RuntimeError, match="test body failed"),
        start_control_plane(crd_files=[], controller_manager=False) as cp,
    ):
        workdir = cp.log_dir
        out = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        raise RuntimeError("test body failed")
    assert len(pids) == 2, "expected etcd and kube-apiserver running inside the block"
    assert not [p for p in pids if _alive(p)]
    assert workdir is not None and not workdir.exists()


def test_missing_binaries_are_reported_not_failed(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DOCPARSER_CONTROLPLANE_BIN_DIR", str(tmp_path))
    with pytest.raises(ControlPlaneUnavailable, match=r"build\.sh"), start_control_plane():
        pass
