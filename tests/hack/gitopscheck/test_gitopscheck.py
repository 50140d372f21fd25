"""gitopscheck itself: it says what the tools say, including where they disagree with us.

The first case is issue 28's finding, kept as the reason the checker exists: kstatus reads
Reconciling before Stalled, so an object with both True is InProgress to Flux (which then waits
out its timeout) while a script keyed on Stalled says Degraded."""

from __future__ import annotations

from typing import Any

import pytest
from gitopscheck.checker import GitOpsCheck, GitOpsCheckError


def obj(*conditions: tuple[str, str], generation: int = 2, observed: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": "inv", "namespace": "ocr", "generation": generation},
        "status": {
            "observedGeneration": observed,
            "conditions": [
                {"type": t, "status": s, "reason": "R", "message": f"{t} is {s}"}
                for t, s in conditions
            ],
        },
    }


def test_kstatus_reads_reconciling_before_stalled(gitops_check: GitOpsCheck) -> None:
    both = obj(("Reconciling", "True"), ("Stalled", "True"))
    assert gitops_check.kstatus(both)[0] == "InProgress"
    assert gitops_check.kstatus(obj(("Reconciling", "False"), ("Stalled", "True")))[0] == "Failed"
    assert gitops_check.kstatus(obj(("Ready", "False")))[0] == "InProgress"
    assert gitops_check.kstatus(obj(("Ready", "True")))[0] == "Current"
    assert gitops_check.kstatus(obj(("Ready", "True"), observed=1))[0] == "InProgress"


def test_lua_runs_with_argo_cds_libraries_only(gitops_check: GitOpsCheck) -> None:
    """Argo CD gives argocd-cm scripts base, table, package and require("os") (time and date):
    no string library and no global os, so a script that uses them fails here as it would there."""
    ok = 'local os = require("os")\nreturn {status = "Healthy", message = os.date("!%Y")}'
    assert gitops_check.argocd_health(obj(), ok)[0] == "Healthy"
    for script in (
        'return {status = "Healthy", message = os.date("!%Y")}',
        'return {status = "Healthy", message = string.lower("X")}',
    ):
        with pytest.raises(GitOpsCheckError, match="non-table object"):
            gitops_check.argocd_health(obj(), script)
    assert gitops_check.argocd_health(obj(), 'return {status = "Fine"}') == (
        "Unknown",
        "Lua returned an invalid health status",
    )


def test_action_patch_is_argo_cds_merge_patch(gitops_check: GitOpsCheck) -> None:
    """An empty table comes back from Lua as [] and Argo CD repairs it to {} where the live
    object had a map; the merge patch then holds only the real change."""
    live = obj() | {"spec": {"resources": {"nodeSelector": {}}, "canary": {"weight": 1}}}
    result = gitops_check.action(live, "t", script="obj.spec.canary = nil\nreturn obj")
    assert result["patch"] == {"spec": {"canary": None}}
    assert result["object"]["spec"] == {"resources": {"nodeSelector": {}}}
    assert gitops_check.discover(live, "return {}") == {}
