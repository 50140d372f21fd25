"""Start a real etcd + kube-apiserver (+ kube-controller-manager) on 127.0.0.1 for tests.

WHY: pruning, CEL validation, defaulting, the status subresource, server-side-apply ownership
and watch semantics are where operators break, and only the real API server implements them
faithfully. The binaries come from hack/controlplane/build.sh (Go modules, cached outside the
clone); this module only runs them.

Usage:
    with start_control_plane() as cp:  # ControlPlaneUnavailable when binaries are missing
        cp.api().get("/api/v1/namespaces")  # or hand cp.kubeconfig to a client
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import yaml

from . import gateway_crds as gateway_crds_mod
from .kubeapi import KubeApi, load_crds
from .processes import ManagedProcess, write_service_account_keys

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
KUBE_VERSION = (HERE / "KUBE_VERSION").read_text().strip()
REQUIRED = ("etcd", "kube-apiserver")
# The Gateway API kinds the operator writes or refers to (the standard channel has more).
GATEWAY_CRD_FILES = tuple(
    f"gateway.networking.k8s.io_{plural}.yaml"
    for plural in ("gatewayclasses", "gateways", "httproutes", "referencegrants")
)
# Enough for ownership, Deployments and Jobs; no scheduler or kubelet, so pods stay Pending.
CONTROLLERS = (
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",  # the weights cache fill Jobs
    "persistentvolumeclaim-protection-controller",  # frees a deleted claim once no pod mounts it
    "namespace-controller",
    "serviceaccount-controller",
    "disruption-controller",  # PDB status, which the Eviction API decides by (drains)
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneUnavailable(RuntimeError):
    """The binaries are not built; tests skip with this message instead of failing."""


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane: where it listens and how to authenticate."""

    server: str
    admin_token: str
    user_token: str  # authenticated as USER_NAME with no groups: RBAC denies everything until bound
    ca_file: Path
    kubeconfig: Path
    version: str
    controller_manager: bool
    installed_crds: list[str] = field(default_factory=list)
    log_dir: Path | None = None

    USER_NAME = "docparser-test-user"

    def api(self, *, token: str | None = None) -> KubeApi:
        """A client (close it or use it as a context manager); admin unless `token` is given."""
        return KubeApi(self.server, token or self.admin_token, self.ca_file)


def cache_dir() -> Path:
    """Where build.sh puts the binaries (the same variables, the same default)."""
    root = os.environ.get("DOCPARSER_CONTROLPLANE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "docparser"
        / "controlplane"
    )
    return Path(root) / KUBE_VERSION


def binaries_dir() -> Path:
    return Path(os.environ.get("DOCPARSER_CONTROLPLANE_BIN_DIR") or cache_dir())


def missing_binaries(directory: Path | None = None) -> list[str]:
    directory = directory or binaries_dir()
    return [name for name in REQUIRED if not os.access(directory / name, os.X_OK)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def start_control_plane(
    *,
    crd_files: list[Path] | None = None,
    gateway_crds: Path | None = None,
    controller_manager: bool = True,
    ready_timeout: float = 90.0,
) -> Iterator[ControlPlane]:
    """Run etcd + kube-apiserver (+ controller manager), install CRDs, yield, then stop everything.

    Processes run in their own process groups with a parent-death signal, so neither a failing
    test nor a killed pytest leaves them behind; the temp dir (etcd data, keys, logs) is removed
    on exit. `crd_files` defaults to crds/docparser.yaml; the Gateway API CRDs come from
    `gateway_crds` (a folder of the official files, by default the fetched Go module's) and are
    required: without them a cluster would silently lack HTTPRoutes.
    """
    bins = binaries_dir()
    missing = missing_binaries(bins)
    if missing:
        raise ControlPlaneUnavailable(
            f"no {', '.join(missing)} for kubernetes {KUBE_VERSION} in {bins}; "
            "build them with `bash hack/controlplane/build.sh` (needs Go and the Go module proxy)"
        )
    gateway = gateway_crds or gateway_crds_mod.crds_dir()
    if not (gateway / gateway_crds_mod.HTTPROUTES).is_file():
        raise ControlPlaneUnavailable(gateway_crds_mod.missing_message())
    workdir = Path(tempfile.mkdtemp(prefix="docparser-controlplane-"))
    processes: list[ManagedProcess] = []
    try:
        etcd_url = _start_etcd(bins, workdir, processes, ready_timeout)
        cp = _start_apiserver(bins, workdir, etcd_url, processes, ready_timeout)
        # The CRDs before the controller manager: its garbage collector learns the resources
        # it watches from discovery, at start and then every 30 s. A DocParser it did not know
        # yet left its children's owner unresolvable; each failed lookup was retried with a
        # growing backoff, and collecting a deleted DocParser's children took 40 s here.
        cp = replace(cp, installed_crds=_install_crds(cp, crd_files, gateway))
        if controller_manager and os.access(bins / "kube-controller-manager", os.X_OK):
            _start_controller_manager(bins, workdir, cp, processes)
            cp = replace(cp, controller_manager=True)
        yield cp
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _start_etcd(bins: Path, workdir: Path, processes: list[ManagedProcess], timeout: float) -> str:
    client, peer = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    etcd = ManagedProcess(
        "etcd",
        [
            str(bins / "etcd"),
            "--name=test",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=test={peer_url}",
            "--unsafe-no-fsync",  # throwaway data: durability only costs time here
            "--log-level=warn",
        ],
        workdir / "etcd.log",
    )
    processes.append(etcd)

    def healthy() -> bool:
        reply = httpx.get(f"{client_url}/health", timeout=2)
        return reply.status_code == 200 and reply.json().get("health") == "true"

    etcd.wait_until(healthy, "etcd /health", timeout)
    return client_url


def _start_apiserver(
    bins: Path, workdir: Path, etcd_url: str, processes: list[ManagedProcess], timeout: float
) -> ControlPlane:
    admin_token, user_token = os.urandom(16).hex(), os.urandom(16).hex()
    tokens = workdir / "tokens.csv"
    tokens.write_text(
        f'{admin_token},docparser-test-admin,admin-uid,"system:masters"\n'
        f"{user_token},{ControlPlane.USER_NAME},user-uid\n"
    )
    public_key, private_key = write_service_account_keys(workdir)
    port = free_port()
    cert_dir = workdir / "certs"
    apiserver = ManagedProcess(
        "kube-apiserver",
        [
            str(bins / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cert_dir}",  # self-signed serving cert (and its CA) written here
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={public_key}",
            f"--service-account-signing-key-file={private_key}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--service-cluster-ip-range=10.0.0.0/16",  # room for benchmarks of 200+ DocParsers
            # No token controller signs into pods here; ServiceAccount admission would reject pods.
            "--disable-admission-plugins=ServiceAccount",
            # The "kubernetes" Service endpoint may not be loopback; nothing here needs it.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ],
        workdir / "kube-apiserver.log",
    )
    processes.append(apiserver)
    server = f"https://127.0.0.1:{port}"
    ca_file = cert_dir / "apiserver.crt"

    def ready() -> bool:
        if not ca_file.exists():
            return False
        reply = httpx.get(
            f"{server}/readyz",
            headers={"Authorization": f"Bearer {admin_token}"},
            verify=ssl.create_default_context(cafile=str(ca_file)),
            timeout=5,
        )
        return reply.status_code == 200

    apiserver.wait_until(ready, "kube-apiserver /readyz", timeout)
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, ca_file, admin_token)))
    return ControlPlane(
        server=server,
        admin_token=admin_token,
        user_token=user_token,
        ca_file=ca_file,
        kubeconfig=kubeconfig,
        version=KUBE_VERSION,
        controller_manager=False,
        log_dir=workdir,
    )


def _start_controller_manager(
    bins: Path, workdir: Path, cp: ControlPlane, processes: list[ManagedProcess]
) -> None:
    kcm = ManagedProcess(
        "kube-controller-manager",
        [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={cp.kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}",
            "--leader-elect=false",
            "--secure-port=0",  # nothing scrapes it; one port fewer to race for
            "--concurrent-gc-syncs=5",
        ],
        workdir / "kube-controller-manager.log",
    )
    processes.append(kcm)
    # A bad flag exits at once: report it here rather than as a confusing test failure.
    time.sleep(0.5)
    kcm.check_alive()


def _install_crds(cp: ControlPlane, crd_files: list[Path] | None, gateway: Path) -> list[str]:
    files = list(crd_files) if crd_files is not None else [REPO_ROOT / "crds" / "docparser.yaml"]
    files = [f for f in files if f.exists()]
    files += [gateway / name for name in GATEWAY_CRD_FILES if (gateway / name).is_file()]
    with cp.api() as api:
        return api.install_crds(load_crds(files))


def _kubeconfig(server: str, ca_file: Path, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        "current-context": "test",
    }
