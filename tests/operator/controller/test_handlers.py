"""handlers.py through its real entry point: `docparser-operator run` as a separate process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from dp_helpers import condition, create, docparser, revision_in, role_deployment
from kube_cluster import Cluster, wait_for

DEPLOY = KNOWN_KINDS["Deployment"]


@pytest.mark.slow
def test_cli_run_reconciles_and_stops_cleanly(cluster: Cluster, tmp_path: Path) -> None:
    """Credentials from KUBECONFIG, one namespace, SIGTERM -> clean exit."""
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "DOCPARSER_OPERATOR_RESYNC_INTERVAL_S": "2",
    }
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "docparser_operator", "run", "--namespace", cluster.namespace],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        create(cluster, docparser("cli"))
        wait_for("deployment", lambda: role_deployment(cluster, "cli"), timeout=60)
        wait_for("status", lambda: condition(cluster, "cli", "Progressing"), timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
        log.close()
    assert code == 0, (tmp_path / "operator.log").read_text()[-3000:]


def test_operator_ignores_other_namespaces(cluster: Cluster, operator: object) -> None:
    if cluster.backend != "emulator":
        pytest.skip("needs a second namespace the fixture does not clean up")
    cluster.client.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}
    )
    other = docparser("other")
    other["metadata"]["namespace"] = "elsewhere"
    cluster.client.apply(other, manager="gitops")
    create(cluster, docparser("mine"))
    wait_for("own namespace reconciled", lambda: role_deployment(cluster, "mine"))
    assert cluster.client.get(DEPLOY, "elsewhere", f"other-{revision_in(other)}") is None
    assert cluster.client.list(DEPLOY, "elsewhere") == []


def test_clusterwide_operator_reconciles_any_namespace(cluster: Cluster) -> None:
    from operator_runner import running_operator

    with running_operator(cluster, clusterwide=True):
        create(cluster, docparser("wide"))
        wait_for("reconciled", lambda: condition(cluster, "wide", "Progressing"))
        assert role_deployment(cluster, "wide") is not None


def _body(generation: int, rv: int, progressing: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u1", "generation": generation, "resourceVersion": str(rv)},
        "status": {"conditions": [{"type": "Progressing", "status": progressing}]},
    }


def test_a_pass_builds_on_the_newest_body_it_knows() -> None:
    """A resync or an event may carry a body older than the status our last pass wrote; the
    next pass must start from the newest (else "was a rollout under way?" reads stale)."""
    from docparser_operator.controller.settings import OperatorSettings
    from docparser_operator.controller.state import OperatorState

    state = OperatorState(settings=OperatorSettings(), client=None)  # type: ignore[arg-type]
    old = _body(2, 10, "False")
    state.known["u1"] = old
    written = _body(2, 12, "True")  # what our status patch returned
    state.saw_write(written)
    assert state.newest(old) is written
    assert state.newest(_body(3, 11, "False"))["metadata"]["generation"] == 3  # a new spec wins
    state.saw_write(_body(2, 11, "False"))  # an older answer never replaces a newer one
    assert state.known["u1"] is written
    del state.known["u1"]  # deleted meanwhile (the watch said so)
    state.saw_write(_body(2, 13, "True"))
    assert "u1" not in state.known  # a deleted DocParser is not brought back to the resync


def test_an_event_older_than_the_body_we_know_does_not_replace_it() -> None:
    """kopf may hand a DocParser's creation event over again after our first pass wrote its
    status; the next pass must still start from that status (else it writes it all again)."""
    from docparser_operator.controller.settings import OperatorSettings
    from docparser_operator.controller.state import OperatorState

    state = OperatorState(settings=OperatorSettings(), client=None)  # type: ignore[arg-type]
    created = _body(1, 6, "False")
    state.saw_event("u1", created)
    written = _body(1, 86, "True")
    state.saw_write(written)
    state.saw_event("u1", _body(1, 6, "False"))  # the creation's event, again
    assert state.known["u1"] is written and state.newest(created) is written
    edited = _body(2, 90, "True")  # a new spec (or any newer event) is taken
    state.saw_event("u1", edited)
    assert state.known["u1"] is edited
    same = _body(2, 90, "True")  # the same version again: taken (opaque versions compare equal)
    state.saw_event("u1", same)
    assert state.known["u1"] is same


def test_the_operator_writes_only_the_status_of_a_docparser(
    cluster: Cluster, operator: object
) -> None:
    """A DocParser created, then its spec changed, gets a pass at once for each generation, and
    the operator's only writes to it are to its status subresource: no kopf bookkeeping in its
    annotations (kopf's change handlers kept the last handled spec there, a PATCH per
    DocParser created or changed), no finalizer."""
    from docparser_operator.api.kinds import DOCPARSER
    from dp_helpers import CANARY_WEIGHTS, set_spec, spec_of

    mark = cluster.mark()
    create(cluster, docparser("own"))
    wait_for("the first revision", lambda: role_deployment(cluster, "own"), timeout=60)
    changed = {**spec_of(cluster, "own"), "canary": {"weights": CANARY_WEIGHTS, "weight": 10}}
    set_spec(cluster, "own", changed)

    def observed_2() -> bool:
        live = cluster.get(DOCPARSER, "own") or {}
        return (live.get("status") or {}).get("observedGeneration") == 2

    wait_for("generation 2 observed", observed_2, timeout=60)
    wait_for("the canary revision", lambda: role_deployment(cluster, "own", "canary"), timeout=60)
    live = cluster.get(DOCPARSER, "own") or {}
    assert not [k for k in live["metadata"].get("annotations") or {} if "last-handled" in k]
    assert not live["metadata"].get("finalizers")
    writes = [
        (r.method, r.path)
        for r in cluster.writes_since(mark)
        if "/docparsers/own" in r.path and not r.path.endswith("/status")
    ]
    assert writes == []
