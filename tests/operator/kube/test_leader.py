"""Leader election on a real kube-apiserver: one of two candidates leads, the standby answers
its liveness probe, and killing the leader hands the Lease over within its duration."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.realcluster, pytest.mark.slow]

CANDIDATE = """
import sys, time, pathlib
from docparser_operator.kube.client import load_configuration
from docparser_operator.kube.leader import LeaseSettings, lead_then
kubeconfig, namespace, identity, marker, port = sys.argv[1:6]
def work():
    pathlib.Path(marker).write_text(identity)
    time.sleep(600)
lease = LeaseSettings("docparser-operator", namespace, identity,
                      lease_duration_s=4, renew_deadline_s=3, retry_period_s=1)
lead_then(work, lease, load_configuration(kubeconfig),
          liveness_endpoint=f"http://127.0.0.1:{port}/healthz")
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _candidate(real_apiserver, namespace: str, identity: str, tmp_path: Path):
    marker, port = tmp_path / f"{identity}.leading", _port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CANDIDATE,
            str(real_apiserver.kubeconfig),
            namespace,
            identity,
            str(marker),
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / f"{identity}.log").open("wb"),
    )
    return proc, marker, port


def _wait(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout}s")


def _holder(real_api, namespace: str) -> str | None:
    lease = real_api.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/docparser-operator"
    )
    return (lease.get("spec") or {}).get("holderIdentity")


def test_one_leads_the_standby_stays_live_and_takes_over(
    real_apiserver, real_api, real_namespace, tmp_path
):
    a, a_marker, _ = _candidate(real_apiserver, real_namespace, "a", tmp_path)
    b = None
    try:
        _wait(a_marker.exists, 30, "a leads")
        b, b_marker, b_port = _candidate(real_apiserver, real_namespace, "b", tmp_path)

        # b follows: its probe answers, it does not run the operator, a holds the Lease.
        _wait(lambda: _probe_ok(b_port), 15, "b's standby liveness endpoint")
        time.sleep(3)  # several of b's retry periods
        assert not b_marker.exists(), (tmp_path / "b.log").read_text()
        assert _holder(real_api, real_namespace) == "a"

        a.kill()
        a.wait(10)
        took = _wait(b_marker.exists, 30, "b takes over after a is killed")
        assert _holder(real_api, real_namespace) == "b"
        print(f"lease handed over {took:.1f}s after the leader was killed (lease 4 s)")
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _probe_ok(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
