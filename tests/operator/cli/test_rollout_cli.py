"""`docparser-operator promote | resume | abort | status`: pure rewrites and the real commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from docparser_operator.api.kinds import DOCPARSER
from docparser_operator.cli.main import render_resource
from docparser_operator.cli.rollout import (
    RolloutCommandError,
    promote_patch,
    promoted,
    resume_patch,
    resume_token,
)
from dp_helpers import CANARY_WEIGHTS, GATEWAY, create, docparser, spec_of
from kube_cluster import Cluster, wait_for

CLI = [sys.executable, "-m", "docparser_operator"]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _cli(cluster: Cluster | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if cluster is not None:
        env["KUBECONFIG"] = str(cluster.kubeconfig)
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_promoted_moves_the_canary_weights_to_stable() -> None:
    dp = docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 100})
    after = promoted(dp)
    assert after["spec"]["weights"] == CANARY_WEIGHTS and "canary" not in after["spec"]
    assert dp["spec"]["canary"]  # pure: the input is untouched
    with pytest.raises(RolloutCommandError, match="no canary"):
        promoted(after)


def test_promote_file_rewrites_only_docparsers(tmp_path: Path) -> None:
    path = tmp_path / "gitops.yaml"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k"}}
    path.write_text(
        yaml.safe_dump_all(
            [secret, yaml.safe_load((EXAMPLES / "deepseek-gateway-canary.yaml").read_text())]
        )
    )
    result = _cli(None, "promote", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert "promoted invoices" in result.stderr
    secret_after, dp = yaml.safe_load_all(path.read_text())
    assert secret_after == secret
    assert dp["spec"]["weights"]["version"] == "2026-03-01" and "canary" not in dp["spec"]
    again = _cli(None, "promote", "-f", str(path))
    assert again.returncode == 2 and "no DocParser with a canary" in again.stderr


def test_resume_ends_a_pause_with_a_new_token_and_only_a_pause() -> None:
    """Argo's `promote` without `--full`: the walk paused after a `pause` step goes on. The
    operator never writes spec, so the person's hand does: a new `analysis.resume` value,
    which is a new generation (what ends a pause, analysis.py)."""
    import datetime

    analysis = {"steps": [{"weight": 10, "pause": True}, {"weight": 50}]}
    dp = docparser("inv", canary={"weights": CANARY_WEIGHTS, "analysis": analysis})
    token = resume_token(datetime.datetime(2026, 12, 1, 23, 59, 1, tzinfo=datetime.UTC))
    assert token == "20261201T235901Z"
    with pytest.raises(RolloutCommandError, match="not started, not Paused"):
        resume_patch(dp, token)
    dp["status"] = {"canary": {"analysis": {"phase": "Progressing"}}}
    with pytest.raises(RolloutCommandError, match="Progressing, not Paused"):
        resume_patch(dp, token)
    dp["status"]["canary"]["analysis"]["phase"] = "Paused"
    assert resume_patch(dp, token) == {"spec": {"canary": {"analysis": {"resume": token}}}}
    # Only the walk moves: the same pod templates, so no new revision and no new pod.
    from docparser_operator.cli.rollout import resumed

    def deployments(resource: dict) -> list[dict]:
        return [o for o in render_resource(resource) if o["kind"] == "Deployment"]

    assert deployments(dp) and deployments(resumed(dp, token)) == deployments(dp)
    manual = docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 10})
    with pytest.raises(RolloutCommandError, match="no canary analysis to resume"):
        resume_patch(manual, token)


def test_resume_file_writes_a_new_token_for_a_git_commit(tmp_path: Path) -> None:
    path = tmp_path / "dp.yaml"
    analysis = {"steps": [{"weight": 10, "pause": True}, {"weight": 50}]}
    path.write_text(
        yaml.safe_dump(docparser("inv", canary={"weights": CANARY_WEIGHTS, "analysis": analysis}))
    )
    result = _cli(None, "resume", "-f", str(path))
    assert result.returncode == 0 and "resumed inv" in result.stderr, result.stderr
    first = yaml.safe_load(path.read_text())["spec"]["canary"]["analysis"]
    assert first["steps"] == analysis["steps"] and len(first["resume"]) == len("20261201T235901Z")
    manual = tmp_path / "manual.yaml"
    manual.write_text(yaml.safe_dump(docparser("inv", canary={"weights": CANARY_WEIGHTS})))
    refused = _cli(None, "resume", "-f", str(manual), "inv")
    assert refused.returncode == 2 and "no canary analysis to resume" in refused.stderr


def test_promote_abort_and_status_on_a_live_docparser(cluster: Cluster, operator: Any) -> None:
    create(
        cluster, docparser("inv", traffic=GATEWAY, canary={"weights": CANARY_WEIGHTS, "weight": 10})
    )
    wait_for("status", lambda: (cluster.get(DOCPARSER, "inv").get("status") or {}).get("canary"))
    shown = _cli(cluster, "status", "inv", "-n", cluster.namespace)
    assert shown.returncode == 0, shown.stderr
    assert "canary  2026-03-01" in shown.stdout and "requested 10%" in shown.stdout
    assert "revisions:" in shown.stdout and "conditions:" in shown.stdout

    manual = _cli(cluster, "resume", "inv", "-n", cluster.namespace)  # a weight by hand
    assert manual.returncode == 2 and "no canary analysis to resume" in manual.stderr

    result = _cli(cluster, "promote", "inv", "-n", cluster.namespace)
    assert result.returncode == 0, result.stderr
    spec = spec_of(cluster, "inv")
    assert spec["weights"]["version"] == "2026-03-01" and "canary" not in spec

    missing = _cli(cluster, "abort", "inv", "-n", cluster.namespace)
    assert missing.returncode == 2 and "no canary to abort" in missing.stderr
    gone = _cli(cluster, "status", "nope", "-n", cluster.namespace)
    assert gone.returncode == 2 and "not found" in gone.stderr


def test_promotion_carries_the_canarys_runtime_override() -> None:
    override = {"image": "example.com/runtime:2.0", "maxBatchSize": 2}
    dp = docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 100, "runtime": override})
    after = promoted(dp)
    assert after["spec"]["runtime"] == {**dp["spec"]["runtime"], **override}
    assert promote_patch(dp)["spec"]["runtime"] == after["spec"]["runtime"]
    plain = docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 100})
    assert "runtime" not in promote_patch(plain)["spec"]  # nothing to carry: runtime untouched


def test_promotion_moves_the_canarys_env_into_pod_env_keeping_its_pod_template() -> None:
    """canary.runtime.env joins spec.pod.env by name: the promoted spec renders the pod
    template the canary ran, so promoting restarts nothing; a manifest edit writes the same."""
    from docparser_operator.cli import manifest_edit

    env = [{"name": "DOCPARSER_MAX_PAGES", "value": "3"}, {"name": "X_NEW", "value": "1"}]
    dp = docparser(
        "inv",
        pod={"env": [{"name": "DOCPARSER_MAX_PAGES", "value": "9"}]},
        canary={"weight": 100, "runtime": {"env": env, "maxBatchSize": 2}},
    )
    after = promoted(dp)
    assert after["spec"]["pod"]["env"] == env and after["spec"]["runtime"]["maxBatchSize"] == 2
    assert promote_patch(dp)["spec"]["pod"] == {"env": env}
    dp["metadata"]["namespace"] = after["metadata"]["namespace"] = "ocr"

    def template(resource: dict, track: str) -> dict:
        deployments = [o for o in render_resource(resource) if o["kind"] == "Deployment"]
        dep = next(d for d in deployments if d["metadata"]["labels"]["docparser.io/track"] == track)
        return dep["spec"]["template"]

    assert template(after, "stable") == template(dp, "canary")
    text = yaml.safe_dump(dp, sort_keys=False)
    assert (
        yaml.safe_load(manifest_edit.edit_document(text, manifest_edit.promote_tree, after))
        == after
    )
