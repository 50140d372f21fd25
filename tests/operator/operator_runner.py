"""Run the real operator (kopf ``run`` of ``docparser_operator.controller.handlers``) in-process.

A module of its own (not conftest) so test modules can import it by a unique name:
several test folders have a ``conftest.py`` and ``from conftest import`` would pick
whichever was imported first.

The operator reads its children from watch-backed indexes, so a quiet resync sends no request
at all; tests count its passes the way a person would, on its ``/metrics`` (every run serves
them on a free port).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from kube_cluster import Cluster
from prometheus_client.parser import text_string_to_metric_families

METRICS_PORT_ENV = "DOCPARSER_OPERATOR_METRICS_PORT"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OperatorRun:
    """A running in-process operator: kopf's runner and where its /metrics answer."""

    runner: Any
    metrics_port: int

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def wait_started(self, timeout: float = 30.0) -> None:
        """Until its start-up ran (it then serves /metrics), so tests begin on a live operator."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.samples()
                return
            except httpx.TransportError:
                if time.monotonic() > deadline or self.runner.future.done():
                    raise
                time.sleep(0.05)

    def reconciles(self, namespace: str, name: str) -> int:
        """Passes over one DocParser so far (events, resyncs and retries alike)."""
        key = (
            "docparser_operator_reconcile_seconds_count",
            (("name", name), ("namespace", namespace)),
        )
        return int(self.samples().get(key, 0))


@contextmanager
def running_operator(cluster: Cluster, *, clusterwide: bool = False) -> Iterator[OperatorRun]:
    """The real operator (kopf `run` of docparser_operator.controller.handlers) against ``cluster``,
    limited to the test namespace unless ``clusterwide`` (the production default)."""
    from kopf.testing import KopfRunner

    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", METRICS_PORT_ENV)}
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    port = int(os.environ.get(METRICS_PORT_ENV) or 0) or free_port()
    os.environ[METRICS_PORT_ENV] = str(port)
    scope = ["--all-namespaces"] if clusterwide else ["--namespace", cluster.namespace]
    args = ["run", "--standalone", *scope, "-m", "docparser_operator.controller.handlers"]
    try:
        with KopfRunner(args, timeout=30) as runner:
            run = OperatorRun(runner, port)
            run.wait_started()
            yield run
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if runner.exception is not None:
        raise runner.exception
