"""Run the real operator (kopf ``run`` of ``docparser_operator.handlers``) in-process.

A module of its own (not conftest) so test modules can import it by a unique name:
several test folders have a ``conftest.py`` and ``from conftest import`` would pick
whichever was imported first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from kube_cluster import Cluster


@contextmanager
def running_operator(cluster: Cluster, *, clusterwide: bool = False) -> Iterator[object]:
    """The real operator (kopf `run` of docparser_operator.handlers) against ``cluster``,
    limited to the test namespace unless ``clusterwide`` (the production default)."""
    from kopf.testing import KopfRunner

    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    scope = ["--all-namespaces"] if clusterwide else ["--namespace", cluster.namespace]
    args = ["run", "--standalone", *scope, "-m", "docparser_operator.handlers"]
    try:
        with KopfRunner(args, timeout=30) as runner:
            yield runner
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
    if runner.exception is not None:
        raise runner.exception
