"""The custom-metrics path of a real cluster, for the real HPA controller: an adapter serving
``custom.metrics.k8s.io/v1beta2`` through the API server's aggregation layer, and the
kube-controller-manager's ``horizontal-pod-autoscaler-controller``.

WHY: a test of "the autoscaler scales before the target is missed" proves nothing if the
test itself decides when to scale. Here the decision is Kubernetes' own: the HPA controller
(the same Go build as the API server) reads the DocParser's rendered HPA, asks the aggregated
custom-metrics API for each pod's ``docparser_estimated_wait_seconds`` and writes the
DocParser's scale subresource, as in production with prometheus-adapter. The adapter stands
in for prometheus-adapter only: it answers each request by reading the selected pods'
``/metrics`` at their pod IPs (a scrape per request, so no scrape interval adds lag that
production would not have at a 1 s interval) and reports what it answered, for the timeline.

The API server reaches the adapter as an APIService whose Service is an ``ExternalName`` of
``localhost`` (the aggregator resolves those to the name and port, so no kube-proxy or
endpoints are needed) over TLS with a self-signed certificate (``insecureSkipTLSVerify``).
The APIService is cluster-scoped: ``registered_adapter`` removes it on exit, or discovery on
the shared test API server would report the group unavailable to later tests.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from controlplane.harness import ControlPlane, binaries_dir
from controlplane.kubeapi import KubeApi, KubeApiError
from controlplane.processes import ManagedProcess
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client.parser import text_string_to_metric_families

GROUP, VERSION = "custom.metrics.k8s.io", "v1beta2"
APISERVICE = f"{VERSION}.{GROUP}"
POD_PORT = 8000  # the runtime container's port (naming.HTTP_PORT)
SCRAPE_TIMEOUT_S = 1.0


@dataclass
class Answer:
    """One answer the adapter gave: when (monotonic), and each pod's value."""

    at: float
    values: dict[str, float]


# (namespace, label selector) -> the pods, as the API server lists them
PodLister = Callable[[str, str], list[dict[str, Any]]]


def api_pods(api: KubeApi) -> PodLister:
    def pods(namespace: str, selector: str) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else {}
        return list(api.get(f"/api/v1/namespaces/{namespace}/pods", **params)["items"])

    return pods


@dataclass
class MetricsAdapter:
    """Serves pod metrics read from the pods' own ``/metrics``; ``answers`` records each reply."""

    pods: PodLister
    metrics: tuple[str, ...]
    answers: list[Answer] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # paths asked, for a failure message
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8))

    def start(self) -> MetricsAdapter:
        adapter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = adapter.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-answer (the aggregator's probes time out)

        server = Server(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = _self_signed(Path(tmp))
            context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server, self.port = server, server.server_address[1]
        threading.Thread(target=server.serve_forever, name="metrics-adapter", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the API ---------------------------------------------------------------------------
    def answer(self, raw_path: str) -> tuple[int, dict[str, Any]]:
        url = urllib.parse.urlsplit(raw_path)
        path = urllib.parse.unquote(url.path).rstrip("/")
        self.requests.append(path)
        gv = f"{GROUP}/{VERSION}"
        if path == "/apis":
            version = {"groupVersion": gv, "version": VERSION}
            group = {"name": GROUP, "versions": [version], "preferredVersion": version}
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
        if path == f"/apis/{GROUP}/{VERSION}":
            resources = [
                {
                    "name": f"pods/{name}",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "MetricValueList",
                    "verbs": ["get"],
                }
                for name in self.metrics
            ]
            return 200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": gv,
                "resources": resources,
            }
        parts = path.split("/")  # /apis/G/V/namespaces/NS/pods/*/METRIC
        if len(parts) == 9 and parts[4] == "namespaces" and parts[6] == "pods":
            namespace, pod, metric = parts[5], parts[7], parts[8]
            if metric in self.metrics:
                selector = urllib.parse.parse_qs(url.query).get("labelSelector", [""])[0]
                return 200, self._pod_values(namespace, pod, metric, selector)
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}

    def _pod_values(self, namespace: str, pod: str, metric: str, selector: str) -> dict[str, Any]:
        pods = [
            p
            for p in self.pods(namespace, selector)
            if (pod in ("*", p["metadata"]["name"]))
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") == "Running"
            and (p.get("status") or {}).get("podIP")
        ]
        read = list(self._pool.map(lambda p: _scrape(p["status"]["podIP"], metric), pods))
        values = {
            p["metadata"]["name"]: v for p, v in zip(pods, read, strict=True) if v is not None
        }
        self.answers.append(Answer(time.monotonic(), values))
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        items = [
            {
                "describedObject": {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": name,
                    "apiVersion": "/v1",
                },
                "metric": {"name": metric},
                "timestamp": stamp,
                "windowSeconds": 1,
                "value": f"{max(0, round(value * 1000))}m",
            }
            for name, value in sorted(values.items())
        ]
        return {"kind": "MetricValueList", "apiVersion": f"{GROUP}/{VERSION}", "items": items}


def _scrape(ip: str, metric: str) -> float | None:
    """The metric's value in the pod's exposition (None: the pod did not answer, as a target
    prometheus-adapter has no series for)."""
    try:
        text = httpx.get(f"http://{ip}:{POD_PORT}/metrics", timeout=SCRAPE_TIMEOUT_S).text
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric:
                return float(sample.value)
    return None


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def registration(namespace: str, port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Service (an ExternalName of localhost: the adapter runs beside the API server) and
    the APIService that make the API server serve the adapter's group."""
    name = "docparser-metrics-adapter"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"namespace": namespace, "name": name, "port": port},
            "insecureSkipTLSVerify": True,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    return service, apiservice


@contextlib.contextmanager
def registered_adapter(
    cp: ControlPlane, namespace: str, metrics: tuple[str, ...], *, timeout: float = 60.0
) -> Iterator[MetricsAdapter]:
    """The adapter running and served by the API server under ``/apis/custom.metrics.k8s.io``
    (its APIService Available), removed again on exit."""
    api = cp.api()
    adapter = MetricsAdapter(api_pods(api), metrics).start()
    try:
        service, apiservice = registration(namespace, adapter.port)
        api.create(f"/api/v1/namespaces/{namespace}/services", service)
        api.create("/apis/apiregistration.k8s.io/v1/apiservices", apiservice)

        def available() -> bool:
            live = api.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
            conditions = (live.get("status") or {}).get("conditions") or []
            ok = any(c["type"] == "Available" and c["status"] == "True" for c in conditions)
            return ok and bool(api.get(f"/apis/{GROUP}/{VERSION}").get("resources"))

        api.wait_for("the custom metrics APIService Available", available, timeout=timeout)
        yield adapter
    finally:
        with contextlib.suppress(KubeApiError):
            api.delete(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        adapter.stop()
        api.close()


# The HPA controller's settings: a 1 s sync (the default is 15 s) so a test of seconds sees
# several decisions; the rest are the defaults (tolerance 0.1, the behaviour from the HPA).
HPA_ARGS = ("--horizontal-pod-autoscaler-sync-period=1s",)


@contextlib.contextmanager
def hpa_controller(cp: ControlPlane, *, args: tuple[str, ...] = HPA_ARGS) -> Iterator[None]:
    """A second kube-controller-manager beside the harness's, running only the HPA
    controller, for as long as the ``with`` lasts (so it acts on no other test's HPAs)."""
    binary = binaries_dir() / "kube-controller-manager"
    log_dir = cp.log_dir or Path(tempfile.gettempdir())
    process = ManagedProcess(
        "kube-controller-manager (hpa)",
        [
            str(binary),
            f"--kubeconfig={cp.kubeconfig}",
            "--controllers=horizontal-pod-autoscaler-controller",
            "--leader-elect=false",
            "--secure-port=0",  # nothing scrapes it
            *args,
        ],
        log_dir / "kube-controller-manager-hpa.log",
    )
    try:
        time.sleep(0.5)
        process.check_alive()  # a bad flag exits at once
        yield
    finally:
        process.stop()


def hpa_log(cp: ControlPlane, lines: int = 40) -> str:
    """The HPA controller's log tail, for a failure message."""
    path = (cp.log_dir or Path(tempfile.gettempdir())) / "kube-controller-manager-hpa.log"
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"
