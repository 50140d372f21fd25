"""The shadow's children on the emulator and a real API server: the internal token Secret is
created once and never read, the ConfigMap <name>-shadow exists only once a shadow was
configured (none, and no request for it, without), is read by name and kept current, and
turning the shadow on or off or replacing the canary writes the ConfigMap only (no pod
restarts)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from docparser_operator.controller.credential import CredentialMemory
from docparser_operator.controller.reconcile import reconcile
from docparser_operator.kube.client import KubeClient
from dp_helpers import CANARY_WEIGHTS, SHA_C, condition, create, docparser, set_spec, spec_of
from kube_cluster import Cluster, client_for, wait_for
from operator_runner import running_operator

SECRET, CONFIG_MAP, DEPLOY, DOCPARSER, PDB = (
    KNOWN_KINDS["Secret"],
    KNOWN_KINDS["ConfigMap"],
    KNOWN_KINDS["Deployment"],
    KNOWN_KINDS["DocParser"],
    KNOWN_KINDS["PodDisruptionBudget"],
)


def _operator(cluster: Cluster) -> KubeClient:
    return client_for(cluster.kubeconfig, user_agent="docparser-operator/test")


def _pass(cluster: Cluster, run: CredentialMemory) -> Any:
    live = cluster.get(KNOWN_KINDS["DocParser"], "inv")
    return reconcile(_operator(cluster), live, credentials=run)


def _shadow_config(cluster: Cluster) -> dict[str, Any]:
    config_map = cluster.get(CONFIG_MAP, "inv-shadow")
    assert config_map is not None
    return json.loads(config_map["data"]["config.json"])  # type: ignore[no-any-return]


def _secret_requests(cluster: Cluster, mark: int) -> list[str]:
    return [r.method for r in cluster.requests_since(mark) if "/secrets" in r.path]


def test_the_token_secret_is_created_once_owned_and_never_read(cluster: Cluster) -> None:
    live = create(cluster, docparser("inv"))
    run = CredentialMemory()
    mark = cluster.mark()
    _pass(cluster, run)
    secret = cluster.get(SECRET, "inv-internal")  # the test reads it; the operator never does
    assert secret is not None
    (owner,) = secret["metadata"]["ownerReferences"]
    assert owner["uid"] == live["metadata"]["uid"] and owner["controller"] is True
    token = base64.b64decode(secret["data"]["token"])
    assert len(token) >= 43  # 32 random bytes, URL-safe base64
    assert _secret_requests(cluster, mark) == ["POST"]
    mark = cluster.mark()
    _pass(cluster, run)  # the same operator run: nothing more
    assert _secret_requests(cluster, mark) == []
    mark = cluster.mark()
    _pass(cluster, CredentialMemory())  # a restarted operator: one create, refused (409)
    assert _secret_requests(cluster, mark) == ["POST"]
    again = cluster.get(SECRET, "inv-internal")
    assert again is not None and again["data"]["token"] == secret["data"]["token"]


def test_a_secret_the_user_made_is_left_alone(cluster: Cluster) -> None:
    mine = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "inv-internal"},
        "stringData": {"token": "chosen-by-the-user"},
    }
    made = create(cluster, mine)
    create(cluster, docparser("inv"))
    outcome = _pass(cluster, CredentialMemory())
    assert [p for p in outcome.problems if p.reason == "Forbidden"] == []
    kept = cluster.get(SECRET, "inv-internal")
    assert kept is not None
    assert kept["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


SHADOW = {"percent": 20, "maxPagesPerMinute": 30}


def test_shadow_on_and_a_new_canary_rewrite_only_the_config_map(cluster: Cluster) -> None:
    run = CredentialMemory()
    create(cluster, docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 0}))
    _pass(cluster, run)
    assert cluster.get(CONFIG_MAP, "inv-shadow") is None  # no shadow yet: none
    deployments = {d["metadata"]["name"] for d in cluster.list(DEPLOY)}
    spec = spec_of(cluster, "inv")
    spec["canary"]["shadow"] = SHADOW
    set_spec(cluster, "inv", spec)
    outcome = _pass(cluster, run)
    assert outcome.applied == [("ConfigMap", "inv-shadow")]
    config = _shadow_config(cluster)
    assert config["enabled"] is True and config["percent"] == 20
    # The canary Service by its ClusterIP once it has one (no cluster DNS needed), else its name.
    service = cluster.get(KNOWN_KINDS["Service"], "inv-canary")
    assert service is not None
    ip = service["spec"].get("clusterIP")
    by_name = f"http://inv-canary.{cluster.namespace}.svc:8000"
    assert config["target"] == (f"http://{ip}:8000" if ip and ip != "None" else by_name)
    assert config["maxPagesPerMinute"] == 30  # one stable pod takes the DocParser's budget
    replaced = copy.deepcopy(spec)
    replaced["canary"]["weights"] = {**CANARY_WEIGHTS, "version": "2026-05-01", "sha256": SHA_C}
    set_spec(cluster, "inv", replaced)
    outcome = _pass(cluster, run)
    created = {d["metadata"]["name"] for d in cluster.list(DEPLOY)} - deployments
    (new_canary,) = created  # the new canary's Deployment, and stable's untouched
    assert config["canaryRevision"] != _shadow_config(cluster)["canaryRevision"]
    assert new_canary.endswith(_shadow_config(cluster)["canaryRevision"])
    # Only the new canary's Deployment is written; stable's pod template is the same.
    assert [k for k in outcome.applied if k[0] == "Deployment"] == [("Deployment", new_canary)]


def test_shadow_off_tells_the_running_pods_and_writes_nothing_else(cluster: Cluster) -> None:
    """The pods keep the last config their mounted file holds: turning the shadow off (with
    the canary kept, or the canary removed) must rewrite ``<name>-shadow`` to ``enabled:
    false``, not leave it or delete it (a deleted ConfigMap leaves the kubelet's last copy in
    running pods). It stays, off, and the next pass writes nothing."""
    run = CredentialMemory()
    canary = {"weights": CANARY_WEIGHTS, "weight": 0, "shadow": SHADOW}
    create(cluster, docparser("inv", canary=canary))
    _pass(cluster, run)
    assert _shadow_config(cluster)["enabled"] is True
    spec = spec_of(cluster, "inv")
    del spec["canary"]["shadow"]
    set_spec(cluster, "inv", spec)
    outcome = _pass(cluster, run)
    assert outcome.applied == [("ConfigMap", "inv-shadow")]  # no pod template changes
    assert _shadow_config(cluster) == {"enabled": False}
    assert _pass(cluster, run).applied == []
    spec["canary"]["shadow"] = SHADOW  # on again, then the canary removed altogether
    set_spec(cluster, "inv", spec)
    _pass(cluster, run)
    assert _shadow_config(cluster)["enabled"] is True
    del spec["canary"]
    set_spec(cluster, "inv", spec)
    outcome = _pass(cluster, run)
    assert ("ConfigMap", "inv-shadow") in outcome.applied
    assert _shadow_config(cluster) == {"enabled": False}


def test_a_docparser_without_a_shadow_costs_no_config_map_request(cluster: Cluster) -> None:
    """Without a shadow no ConfigMap is rendered (its pods mount it ``optional``; the runtime
    reads a missing file as off): a DocParser created costs one apply fewer, and neither its
    first pass (new: not read), the passes after it, nor the passes of a restarted operator
    beyond one read (then trusted: nothing to mirror) ask for it."""
    from docparser_operator.kube.observer import IndexedObserver

    create(cluster, docparser("inv"))
    api = _operator(cluster)
    clock = [0.0]
    seen = IndexedObserver({}, client=api, clock=lambda: clock[0])
    mark = cluster.mark()

    def configmap_requests() -> list[str]:
        return [r.method for r in cluster.requests_since(mark) if "/configmaps" in r.path]

    for _ in range(3):  # the first pass, then two more (no longer new)
        live = cluster.get(KNOWN_KINDS["DocParser"], "inv")
        reconcile(api, live, observer=seen, credentials=CredentialMemory())
        clock[0] += 3600.0
    assert configmap_requests() == []
    assert cluster.get(CONFIG_MAP, "inv-shadow") is None
    restarted = IndexedObserver({}, client=api, clock=lambda: clock[0])
    for _ in range(3):  # one read, found none: none is as inert as one that says off
        restarted(cluster.namespace, "inv")
        clock[0] += 3600.0
    assert configmap_requests() == ["GET"]


def test_a_deleted_config_map_is_put_back_by_the_next_pass(cluster: Cluster) -> None:
    run = CredentialMemory()
    create(cluster, docparser("inv", canary={"weights": CANARY_WEIGHTS, "shadow": SHADOW}))
    _pass(cluster, run)
    config_map = cluster.get(CONFIG_MAP, "inv-shadow")
    assert config_map is not None
    cluster.client.delete(
        CONFIG_MAP, cluster.namespace, "inv-shadow", uid=config_map["metadata"]["uid"]
    )
    outcome = _pass(cluster, run)
    assert ("ConfigMap", "inv-shadow") in outcome.applied
    assert _shadow_config(cluster)["enabled"] is True


def test_status_says_what_the_shadow_is_told(cluster: Cluster) -> None:
    shadow = {"percent": 25, "maxPagesPerMinute": 7}
    canary = {"weights": CANARY_WEIGHTS, "weight": 0, "shadow": shadow}
    create(cluster, docparser("inv", replicas={"min": 2, "max": 2}, canary=canary))
    outcome = _pass(cluster, CredentialMemory())
    assert outcome.status.to_wire()["canary"]["shadow"] == {
        "enabled": True,
        "percent": 25,
        "podPagesPerMinute": 4,  # 7 pages a minute over 2 stable pods, rounded up
    }


def test_the_watch_backed_observer_reads_the_config_map_once_per_ttl(cluster: Cluster) -> None:
    """The operator's observer has no ConfigMap index (it never watches ConfigMaps): it gets
    <name>-shadow by name, then trusts that (or its own write) for NAMED_TTL_S, so a quiet
    cluster costs one get per DocParser per TTL; a deletion is seen after it."""
    from docparser_operator.kube.observer import IndexedObserver

    create(cluster, docparser("inv", canary={"weights": CANARY_WEIGHTS, "shadow": SHADOW}))
    _pass(cluster, CredentialMemory())
    clock = [0.0]
    seen = IndexedObserver({}, client=_operator(cluster), named_ttl_s=600, clock=lambda: clock[0])

    def gets() -> int:
        return len([r for r in cluster.requests_since(mark) if "/configmaps/" in r.path])

    mark = cluster.mark()
    first = seen(cluster.namespace, "inv").children[("ConfigMap", "inv-shadow")]
    assert gets() == 1
    clock[0] = 599.0
    assert seen(cluster.namespace, "inv").children[("ConfigMap", "inv-shadow")] == first
    assert gets() == 1  # trusted: no request
    rewritten = {**first, "data": {"config.json": '{"enabled":true,"percent":50}'}}
    seen.remember(cluster.namespace, "inv", {("ConfigMap", "inv-shadow"): rewritten}, {})
    assert seen(cluster.namespace, "inv").children[("ConfigMap", "inv-shadow")] == rewritten
    cluster.client.delete(CONFIG_MAP, cluster.namespace, "inv-shadow", uid=first["metadata"]["uid"])
    clock[0] = 599.0 + 601.0
    assert ("ConfigMap", "inv-shadow") not in seen(cluster.namespace, "inv").children
    assert gets() == 2


def test_a_config_map_that_mirrors_nothing_is_never_read_again_at_rest(cluster: Cluster) -> None:
    """After a shadow was turned off <name>-shadow says ``enabled: false``, which the runtime
    also reads from a missing or edited one: the observer trusts it until a pass writes
    another, so a DocParser at rest costs no request however long it rests."""
    from docparser_operator.kube.observer import IndexedObserver

    create(cluster, docparser("inv", canary={"weights": CANARY_WEIGHTS, "shadow": SHADOW}))
    _pass(cluster, CredentialMemory())
    spec = spec_of(cluster, "inv")
    del spec["canary"]
    set_spec(cluster, "inv", spec)
    _pass(cluster, CredentialMemory())
    clock = [0.0]
    seen = IndexedObserver({}, client=_operator(cluster), named_ttl_s=600, clock=lambda: clock[0])
    mark = cluster.mark()
    got = seen(cluster.namespace, "inv").children[("ConfigMap", "inv-shadow")]
    assert json.loads(got["data"]["config.json"]) == {"enabled": False}
    for hour in range(1, 25):
        clock[0] = hour * 3600.0
        assert seen(cluster.namespace, "inv").children[("ConfigMap", "inv-shadow")] == got
    assert len([r for r in cluster.requests_since(mark) if "/configmaps/" in r.path]) == 1
    mirroring = {**got, "data": {"config.json": '{"enabled":true,"percent":10}'}}
    seen.remember(cluster.namespace, "inv", {("ConfigMap", "inv-shadow"): mirroring}, {})
    clock[0] += 601.0  # a config that mirrors is read again after the TTL
    seen(cluster.namespace, "inv")
    assert len([r for r in cluster.requests_since(mark) if "/configmaps/" in r.path]) == 2


def test_a_docparser_made_again_under_its_name_does_not_inherit_the_old_config_map(
    cluster: Cluster,
) -> None:
    """The running operator's observer remembers ``<name>-shadow`` by namespace and name, and
    one that says off is trusted for ever. A DocParser deleted (its ConfigMap collected) and
    made again under its name saw the first one's ConfigMap, owned by the old uid: a
    ChildConflict until the operator restarted. The deletion event now clears what the
    observer kept of the first one (``IndexedObserver.forget_owner``)."""
    if not cluster.has_garbage_collector:
        pytest.skip("needs the garbage collector to remove the first DocParser's ConfigMap")
    with running_operator(cluster):
        canary = {"weights": CANARY_WEIGHTS, "weight": 0, "shadow": SHADOW}
        first = create(cluster, docparser("inv", canary=canary))

        def config() -> dict[str, Any] | None:
            found = cluster.get(CONFIG_MAP, "inv-shadow")
            return json.loads(found["data"]["config.json"]) if found else None

        wait_for("the shadow on", lambda: (config() or {}).get("enabled") is True, timeout=60)
        spec = spec_of(cluster, "inv")
        del spec["canary"]
        set_spec(cluster, "inv", spec)
        wait_for("the shadow off", lambda: config() == {"enabled": False}, timeout=60)
        cluster.client.delete(DOCPARSER, cluster.namespace, "inv", uid=first["metadata"]["uid"])
        children = (CONFIG_MAP, "inv-shadow"), (KNOWN_KINDS["Service"], "inv"), (PDB, "inv")
        wait_for(  # all of them: one of the old uid left is a ChildConflict, rightly
            "its children collected",
            lambda: (
                all(cluster.get(kind, child) is None for kind, child in children)
                and not cluster.list(DEPLOY)
            ),
            timeout=60,
        )
        second = create(cluster, docparser("inv"))

        def reported() -> bool:
            live = cluster.get(DOCPARSER, "inv") or {"metadata": {}}
            return (live.get("status") or {}).get("observedGeneration") == live["metadata"].get(
                "generation"
            ) and live["metadata"].get("uid") == second["metadata"]["uid"]

        wait_for("the second DocParser reconciled", reported, timeout=60)
        degraded = condition(cluster, "inv", "Degraded")
        assert "ConfigMap" not in degraded.get("message", ""), degraded
        assert degraded.get("reason") != "ChildConflict", degraded
        assert config() is None  # no shadow: none rendered for the second one
