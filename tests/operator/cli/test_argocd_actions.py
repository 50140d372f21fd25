"""The chart's Argo CD resource actions (files/argocd-actions.yaml), run in gopher-lua the way
Argo CD runs them (tests/gitopscheck): each action writes what the CLI writes, refuses what the
CLI refuses, and the discovery script offers each one only where the CLI would accept it.

The last test applies both patches to live objects on the real API server: the spec Argo CD's
action leaves is the spec `docparser-operator` leaves."""

from __future__ import annotations

import copy
import datetime
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from docparser_operator.cli.rollout import (
    RolloutCommandError,
    abort_patch,
    promote_patch,
    promoted,
    resume_patch,
    resumed,
    rewrite_file,
    set_weight_patch,
    with_weight,
)
from gitopscheck.checker import GitOpsCheck, GitOpsCheckError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TOKEN = re.compile(r"^\d{8}T\d{6}Z$")


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def canary_dp(**canary: Any) -> dict[str, Any]:
    """The commented GitOps example, as Argo CD holds it live (a generation and a status)."""
    dp = example("deepseek-gateway-canary.yaml")
    dp["metadata"]["generation"] = 4
    dp["spec"]["canary"].update(canary)
    dp["status"] = {"observedGeneration": 4, "conditions": []}
    return dp


def paused(dp: dict[str, Any]) -> dict[str, Any]:
    dp = copy.deepcopy(dp)
    dp["spec"]["canary"].pop("weight", None)
    dp["spec"]["canary"]["analysis"] = {"steps": [{"weight": 10, "pause": True}, {"weight": 50}]}
    dp["status"]["canary"] = {"analysis": {"phase": "Paused", "step": 1}}
    return dp


def merged(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies one (the patches differ in form:
    Argo CD diffs the whole object, the CLI sends whole fields)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def refusal(call: Any) -> str:
    with pytest.raises(RolloutCommandError) as err:
        call()
    return str(err.value)


def test_promote_writes_the_clis_promotion(gitops_check: GitOpsCheck) -> None:
    runtime = {"image": "ghcr.io/example/docparser-runtime:0.3.0", "maxBatchSize": 4}
    for dp in (canary_dp(), canary_dp(runtime=runtime)):
        result = gitops_check.action(dp, "promote")
        assert result["object"]["spec"] == promoted(dp)["spec"]
        assert merged(dp, result["patch"]) == merged(dp, promote_patch(dp)) == promoted(dp)
    bare = promoted(canary_dp())
    with pytest.raises(GitOpsCheckError) as err:
        gitops_check.action(bare, "promote")
    assert str(err.value) == refusal(lambda: promote_patch(bare))


ENV = [
    {"name": "DOCPARSER_MAX_PAGES", "value": "800"},  # over spec.pod.env's entry of that name
    {"name": "DOCPARSER_TEST_FLAG", "valueFrom": {"secretKeyRef": {"name": "flags", "key": "x"}}},
]
SETTINGS = {
    "image": "ghcr.io/example/docparser-runtime:0.3.0",
    "imagePullPolicy": "Always",
    "maxBatchSize": 4,
    "maxNewTokens": 2048,
    "startupTimeoutSeconds": 900,
}


def _no_pod(dp: dict[str, Any]) -> dict[str, Any]:
    del dp["spec"]["pod"]
    return dp


def _no_weights(dp: dict[str, Any]) -> dict[str, Any]:
    del dp["spec"]["canary"]["weights"]
    return dp


CANARIES = {  # the example's canary has weights, weight 10 and a shadow; these add to it
    "weights-shadow": lambda: canary_dp(),
    "settings": lambda: canary_dp(runtime=SETTINGS),
    "env": lambda: canary_dp(runtime={"env": ENV}),
    "env-settings": lambda: canary_dp(runtime={**SETTINGS, "env": ENV}),
    "env-empty": lambda: canary_dp(runtime={"env": []}),
    "env-no-pod": lambda: _no_pod(canary_dp(runtime={"image": "r:2", "env": ENV[1:]})),
    "runtime-only-analysis": lambda: paused(_no_weights(canary_dp(runtime={"env": ENV}))),
}


@pytest.mark.parametrize("case", sorted(CANARIES))
def test_every_action_writes_the_object_the_cli_writes(
    gitops_check: GitOpsCheck, case: str
) -> None:
    """For each kind of canary, the object each action leaves is the one every CLI path
    leaves: the pure function, the live merge patch and ``promote -f``'s manifest edit. The
    stable side carries spec.pod.envFrom and spec.resources, which nothing may touch."""
    dp = CANARIES[case]()
    dp["spec"].setdefault("pod", {})["envFrom"] = [{"secretRef": {"name": "runtime-extra"}}]
    expected = promoted(dp)
    result = gitops_check.action(dp, "promote")
    assert result["object"] == expected
    assert merged(dp, result["patch"]) == merged(dp, promote_patch(dp)) == expected
    written, names = rewrite_file("promote", yaml.safe_dump(dp, sort_keys=False))
    assert names == ["invoices"] and yaml.safe_load(written) == expected
    assert "env" not in expected["spec"]["runtime"]
    assert expected["spec"]["resources"] == dp["spec"]["resources"]
    assert expected["spec"]["pod"]["envFrom"] == dp["spec"]["pod"]["envFrom"]

    result = gitops_check.action(dp, "abort")
    assert merged(dp, result["patch"]) == merged(dp, abort_patch(dp)) == result["object"]
    if dp["spec"]["canary"].get("analysis") is not None:
        result = gitops_check.action(dp, "resume")
        token = result["object"]["spec"]["canary"]["analysis"]["resume"]
        assert result["object"] == resumed(dp, token)
        assert merged(dp, result["patch"]) == merged(dp, resume_patch(dp, token))
    else:
        result = gitops_check.action(dp, "set-weight", {"weight": "30"})
        assert result["object"] == with_weight(dp, 30)
        assert merged(dp, result["patch"]) == merged(dp, set_weight_patch(dp, 30))


def test_abort_removes_the_canary_as_the_cli_does(gitops_check: GitOpsCheck) -> None:
    dp = canary_dp()
    assert (
        gitops_check.action(dp, "abort")["patch"] == abort_patch(dp) == {"spec": {"canary": None}}
    )
    bare = promoted(dp)
    with pytest.raises(GitOpsCheckError) as err:
        gitops_check.action(bare, "abort")
    assert str(err.value) == refusal(lambda: abort_patch(bare))


def test_set_weight_takes_its_parameter_as_argo_cd_passes_it(gitops_check: GitOpsCheck) -> None:
    dp = canary_dp(weight=10)
    result = gitops_check.action(dp, "set-weight", {"weight": "25"})  # parameters are strings
    assert result["patch"] == set_weight_patch(dp, 25) == {"spec": {"canary": {"weight": 25}}}
    assert result["object"]["spec"] == with_weight(dp, 25)["spec"]
    for bad in ("101", "-1", "2.5", "half"):
        with pytest.raises(GitOpsCheckError, match="whole number from 0 to 100"):
            gitops_check.action(dp, "set-weight", {"weight": bad})
    with pytest.raises(GitOpsCheckError, match=r"Argo CD 3\.1 or later"):
        gitops_check.action(dp, "set-weight")  # an Argo CD without action parameters
    walked = paused(dp)
    with pytest.raises(GitOpsCheckError) as err:
        gitops_check.action(walked, "set-weight", {"weight": "25"})
    assert str(err.value) == refusal(lambda: set_weight_patch(walked, 25))


def test_resume_writes_a_token_only_on_a_paused_walk(gitops_check: GitOpsCheck) -> None:
    dp = paused(canary_dp())
    result = gitops_check.action(dp, "resume")
    token = result["object"]["spec"]["canary"]["analysis"]["resume"]
    assert TOKEN.match(token), token
    written = datetime.datetime.strptime(token, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    assert abs((datetime.datetime.now(datetime.UTC) - written).total_seconds()) < 120
    assert merged(dp, result["patch"]) == merged(dp, resume_patch(dp, token))
    running = copy.deepcopy(dp)
    running["status"]["canary"]["analysis"]["phase"] = "Progressing"
    with pytest.raises(GitOpsCheckError) as err:
        gitops_check.action(running, "resume")
    assert str(err.value) == refusal(lambda: resume_patch(running, token))


def test_discovery_offers_what_the_cli_accepts(gitops_check: GitOpsCheck) -> None:
    def enabled(dp: dict[str, Any]) -> set[str]:
        found = gitops_check.discover(dp)
        assert set(found) == {"promote", "abort", "resume", "set-weight"}
        assert found["set-weight"]["params"] == [{"name": "weight"}]
        return {name for name, action in found.items() if not action.get("disabled")}

    manual = canary_dp()
    assert enabled(manual) == {"promote", "abort", "set-weight"}
    assert enabled(paused(manual)) == {"promote", "abort", "resume"}
    running = paused(manual)
    running["status"]["canary"]["analysis"]["phase"] = "Progressing"
    assert enabled(running) == {"promote", "abort"}
    assert enabled(promoted(manual)) == set()


@pytest.mark.realcluster
def test_actions_and_cli_patches_leave_the_same_live_spec(
    gitops_check: GitOpsCheck, real_api: Any, real_namespace: str
) -> None:
    """Argo CD sends its action's merge patch to the live object; the CLI sends its own. On two
    copies of one DocParser on the real API server (defaults and all), both leave one spec."""
    from controlplane.kubeapi import KubeApi

    api: KubeApi = real_api
    base = f"/apis/docparser.io/v1alpha1/namespaces/{real_namespace}/docparsers"
    source = example("deepseek-gateway-canary.yaml")
    source["metadata"] = {"name": "inv", "namespace": real_namespace}
    source["spec"]["canary"]["runtime"] = {"image": "ghcr.io/example/docparser-runtime:0.3.0"}
    source["spec"]["canary"]["runtime"]["env"] = ENV[:1]  # a field spec.runtime lacks

    def both(verb: str, params: dict[str, str] | None = None) -> None:
        live = {}
        for who in ("argo", "cli"):
            obj = copy.deepcopy(source)
            obj["metadata"]["name"] = f"{verb}-{who}"
            created = api.create(base, obj)  # the live object: defaults, generation, uid
            if who == "argo":
                patch = gitops_check.action(created, verb, params)["patch"]
            elif verb == "set-weight":
                patch = set_weight_patch(created, int((params or {})["weight"]))
            else:
                patch = {"promote": promote_patch, "abort": abort_patch}[verb](created)
            live[who] = api.merge_patch(f"{base}/{verb}-{who}", patch)
        assert live["argo"]["spec"] == live["cli"]["spec"], verb

    both("promote")
    both("abort")
    both("set-weight", {"weight": "40"})


def test_the_documented_argocd_cm_is_the_charts_files() -> None:
    """docs/operations.md shows the argocd-cm snippet to paste: it must be the shipped files."""
    docs = (Path(__file__).resolve().parents[3] / "docs/operations.md").read_text()
    block = docs.split("<!-- argocd-cm -->")[1].split("<!-- /argocd-cm -->")[0]
    config = yaml.safe_load(block.split("```yaml")[1].split("```")[0])
    files = Path(__file__).resolve().parents[3] / "charts/docparser-operator/files"
    data = config["data"]
    assert (
        data["resource.customizations.health.docparser.io_DocParser"]
        == (files / "argocd-health.lua").read_text()
    )
    assert (
        data["resource.customizations.actions.docparser.io_DocParser"]
        == (files / "argocd-actions.yaml").read_text()
    )


def test_promote_of_a_runtime_only_canary_keeps_stables_weights(
    gitops_check: GitOpsCheck,
) -> None:
    dp = example("rapidocr-runtime-canary.yaml") | {"status": {"observedGeneration": 1}}
    dp["metadata"]["generation"] = 1
    result = gitops_check.action(dp, "promote")
    assert result["object"]["spec"] == promoted(dp)["spec"]
    assert "weights" not in result["object"]["spec"]
    assert result["object"]["spec"]["runtime"]["image"].endswith(":0.2.0")
    assert merged(dp, result["patch"]) == merged(dp, promote_patch(dp))
