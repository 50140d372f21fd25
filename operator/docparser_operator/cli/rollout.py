"""``docparser-operator promote | resume | abort | set-weight | status``: the rollout verbs.

The operator never writes ``spec``; these commands are the user's hand, like ``kubectl argo
rollouts promote``. ``promote NAME`` / ``abort NAME`` patch the live DocParser (for clusters
driven by ``kubectl``); ``promote -f FILE`` rewrites a manifest file for a Git commit (for
clusters driven by Argo CD or Flux, where a live patch would be reverted by the next sync).
``resume NAME`` (or ``-f FILE``) gives ``analysis.resume`` a new value: a walk paused after a
``pause`` step goes on (Argo's ``promote`` without ``--full``). ``set-weight NAME N`` moves a
manual canary's requested weight. The chart's Argo CD actions (files/argocd-actions.yaml) write
exactly these patches. ``status NAME`` prints the
rollout as the operator sees it: revisions, pods, traffic,
conditions and the last events.

Promotion copies the canary's weights into ``spec.weights`` (none for a runtime-only canary,
which runs stable's) and its runtime override into ``spec.runtime`` (its ``env`` into
``spec.pod.env`` by name: ``spec.runtime`` has no ``env``), and removes ``spec.canary``: the
canary's revision becomes the stable one. When its pods are Ready that is instant; otherwise
the operator moves capacity make-before-break. Abort removes ``spec.canary``: traffic returns
to stable as fast as stable's Ready pods can carry it, then the canary's pods go.
"""

from __future__ import annotations

import copy
import datetime
import sys
from typing import Any, TextIO

import yaml

from docparser_operator.api import labels, naming
from docparser_operator.cli.connection import Connection

FIELD_MANAGER = naming.CLI_FIELD_MANAGER


class RolloutCommandError(ValueError):
    """The DocParser cannot take this verb (no canary to promote, not found, ...)."""


def promoted(resource: dict[str, Any]) -> dict[str, Any]:
    """The DocParser with its canary promoted (pure)."""
    spec = (resource.get("spec") or {}).copy()
    canary = spec.get("canary")
    if not canary:
        name = (resource.get("metadata") or {}).get("name", "?")
        raise RolloutCommandError(f"DocParser {name} has no canary to promote")
    out = copy.deepcopy(resource)
    if canary.get("weights"):  # a runtime-only canary runs stable's weights: they stay
        out["spec"]["weights"] = copy.deepcopy(canary["weights"])
    runtime = dict(canary.get("runtime") or {})
    env = runtime.pop("env", None)
    if runtime:  # the canary's runtime override becomes the runtime
        out["spec"]["runtime"] = {**(spec.get("runtime") or {}), **runtime}
    if env:  # its env joins spec.pod.env (by name): the same pod template, no restart
        pod = out["spec"].setdefault("pod", {})
        pod["env"] = merged_env(pod.get("env") or [], env)
    del out["spec"]["canary"]
    return out


def merged_env(base: list[dict[str, Any]], over: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``base`` with ``over``'s entries replacing those of the same name, in the order the
    operator renders them (api/models.py RuntimeOverride.env_over)."""
    names = {e.get("name") for e in over}
    return [e for e in base if e.get("name") not in names] + copy.deepcopy(list(over))


def promote_patch(resource: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that promotes the live object (``canary: null`` removes it)."""
    after = promoted(resource)
    canary = (resource.get("spec") or {}).get("canary") or {}
    patch: dict[str, Any] = {"canary": None}
    if canary.get("weights"):
        patch["weights"] = after["spec"]["weights"]
    if {k for k in canary.get("runtime") or {} if k != "env"}:
        patch["runtime"] = after["spec"]["runtime"]
    if (canary.get("runtime") or {}).get("env"):
        patch["pod"] = {"env": after["spec"]["pod"]["env"]}
    return {"spec": patch}


def abort_patch(resource: dict[str, Any]) -> dict[str, Any]:
    if not (resource.get("spec") or {}).get("canary"):
        name = (resource.get("metadata") or {}).get("name", "?")
        raise RolloutCommandError(f"DocParser {name} has no canary to abort")
    return {"spec": {"canary": None}}


def with_weight(resource: dict[str, Any], weight: int) -> dict[str, Any]:
    """The DocParser with ``spec.canary.weight`` set (pure); refused where the weight means
    nothing: no canary, or a canary whose analysis walks the weight itself."""
    name = (resource.get("metadata") or {}).get("name", "?")
    canary = (resource.get("spec") or {}).get("canary")
    if not canary:
        raise RolloutCommandError(f"DocParser {name} has no canary to set a weight on")
    if canary.get("analysis") is not None:
        raise RolloutCommandError(
            f"DocParser {name}'s canary.analysis sets the weight: promote or abort instead"
        )
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
        raise RolloutCommandError(f"weight must be a whole number from 0 to 100, not {weight}")
    out = copy.deepcopy(resource)
    out["spec"]["canary"]["weight"] = weight
    return out


def set_weight_patch(resource: dict[str, Any], weight: int) -> dict[str, Any]:
    """The merge patch that moves the live canary's requested weight."""
    with_weight(resource, weight)  # the same refusals
    return {"spec": {"canary": {"weight": weight}}}


def resume_token(now: datetime.datetime | None = None) -> str:
    """A new ``analysis.resume`` value: the time, readable in a Git diff."""
    return (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")


def resumed(resource: dict[str, Any], token: str) -> dict[str, Any]:
    """The DocParser with a new ``analysis.resume`` (pure): the next generation ends a pause."""
    analysis = ((resource.get("spec") or {}).get("canary") or {}).get("analysis")
    if analysis is None:
        name = (resource.get("metadata") or {}).get("name", "?")
        raise RolloutCommandError(f"DocParser {name} has no canary analysis to resume")
    out = copy.deepcopy(resource)
    out["spec"]["canary"]["analysis"]["resume"] = token
    return out


def resume_patch(resource: dict[str, Any], token: str) -> dict[str, Any]:
    """The merge patch that resumes the live object's paused walk; refused unless its status
    says Paused (a resume of a running walk would only be a spec change to explain)."""
    resumed(resource, token)  # the same refusal without an analysis
    phase = (((resource.get("status") or {}).get("canary") or {}).get("analysis") or {}).get(
        "phase"
    )
    if phase != "Paused":
        name = resource["metadata"]["name"]
        raise RolloutCommandError(
            f"DocParser {name}'s analysis is {phase or 'not started'}, not Paused"
        )
    return {"spec": {"canary": {"analysis": {"resume": token}}}}


def rewrite_file(
    verb: str, text: str, name: str | None = None, *, weight: int | None = None
) -> tuple[str, list[str]]:
    """Rewrite a manifest stream: promote (resume, set the weight of) every DocParser with a
    canary, or the one named; returns the new text and the names changed. Only the changed
    documents are re-emitted, through a comment-preserving round trip (manifest_edit.py);
    other documents pass through byte for byte."""
    from docparser_operator.cli import manifest_edit

    token = resume_token()
    pure: dict[str, Any] = {
        "promote": promoted,
        "resume": lambda doc: resumed(doc, token),
        "set-weight": lambda doc: with_weight(doc, -1 if weight is None else weight),
    }
    edits: dict[str, manifest_edit.Edit] = {
        "promote": manifest_edit.promote_tree,
        "resume": manifest_edit.resume_tree(token),
        "set-weight": manifest_edit.weight_tree(-1 if weight is None else weight),
    }
    out, done = [], []
    for separator, chunk in manifest_edit.split_documents(text):
        doc = yaml.safe_load(chunk) if chunk.strip() else None
        doc_name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
        mine = isinstance(doc, dict) and doc.get("kind") == naming.KIND
        if mine and (name is None or doc_name == name):
            assert isinstance(doc, dict)
            if (doc.get("spec") or {}).get("canary"):
                expected = pure[verb](doc)  # the refusals of the live verbs
                chunk = manifest_edit.edit_document(chunk, edits[verb], expected)
                done.append(str(doc_name))
            elif name is not None:
                raise RolloutCommandError(f"DocParser {doc_name} has no canary to {verb}")
        out.append(separator + chunk)
    if not done:
        raise RolloutCommandError("no DocParser with a canary in the file")
    return "".join(out), done


def _condition_line(c: dict[str, Any]) -> str:
    head = f"  {c.get('type', '?'):<12} {c.get('status', '?'):<6}"
    return f"{head} {c.get('reason', '')}: {c.get('message', '')}"


def _shadow_lines(shadow: dict[str, Any]) -> list[str]:
    """The shadow's figures (status.canary.shadow): what stable's pods are told, and the
    comparison over the span measured last (docs/operations.md, "Shadow canary")."""
    if not shadow:
        return []
    told = (
        f"on, {shadow.get('percent', '-')}% of answered requests, "
        f"{shadow.get('podPagesPerMinute', '-')} pages/min per stable pod"
        if shadow.get("enabled")
        else "off"
    )
    lines = [f"shadow  {told}"]
    if "pagesCompared" in shadow:
        q = round(100 * float(shadow.get("quantile") or 0))
        dropped = ", ".join(f"{d['reason']} {d['requests']:g}" for d in shadow.get("dropped") or [])
        lines.append(
            f"        since {shadow.get('since', '-')}: {shadow['pagesCompared']:g} pages "
            f"compared, {shadow.get('pagesMirrored', 0):g} sent "
            f"({shadow.get('pagesPerMinute', 0):g}/min), p{q} CER {shadow.get('cer', 0):.4f}, "
            f"truncation {shadow.get('truncationIncrease', 0):+.4f}, "
            f"structure differs on {shadow.get('structureDisagreements', 0):g}, "
            f"dropped: {dropped or 'none'}"
        )
    return lines


def _batch_lines(spec: dict[str, Any] | None, batch: dict[str, Any] | None) -> list[str]:
    """status.batch in one or two lines: the pool's size and the batches' progress; nothing
    without spec.batch (backfill alone has no section)."""
    if not spec and not batch:
        return []
    batch = batch or {}
    replicas = (spec or {}).get("replicas") or {}
    lines = [
        f"batch   pool {batch.get('readyReplicas', 0)}/{batch.get('replicas', 0)} ready "
        f"(min {replicas.get('min', 0)}, max {replicas.get('max', '-')})  "
        f"batches in progress {batch.get('batchesInProgress', 0)}"
    ]
    if batch.get("batchesInProgress"):
        eta = batch.get("etaMinutes")
        lines.append(
            f"        pages queued {batch.get('pagesQueued', 0):g}, done "
            f"{batch.get('pagesDone', 0):g}, {batch.get('pagesPerMinute', 0):g}/min, "
            f"ETA {f'{eta} min' if eta is not None else '-'}"
        )
    return lines


def render_status(
    dp: dict[str, Any], deployments: list[dict[str, Any]], events: list[dict[str, Any]]
) -> str:
    """The readable rollout view (pure)."""
    meta, spec, status = dp["metadata"], dp.get("spec") or {}, dp.get("status") or {}
    stable, canary = status.get("stable") or {}, status.get("canary") or {}
    rollout = status.get("rollout") or {}
    lines = [
        f"DocParser {meta.get('namespace')}/{meta['name']}  endpoint {status.get('endpoint', '-')}",
        f"size {rollout.get('size', '-')}  pods {rollout.get('pods', '-')}  "
        f"maxSurge {rollout.get('maxSurge', '-')}  ready {status.get('replicas', 0)}",
        f"stable  {stable.get('version', '-'):<14} revision {stable.get('revision', '-')}  "
        f"ready {stable.get('readyReplicas', 0)}",
    ]
    if spec.get("canary") or canary:
        requested = canary.get("requestedWeight", (spec.get("canary") or {}).get("weight", 0))
        lines.append(
            f"canary  {canary.get('version', '-'):<14} revision {canary.get('revision', '-')}  "
            f"ready {canary.get('readyReplicas', 0)}  weight {canary.get('weight', 0)}% "
            f"(requested {requested}%)"
        )
    lines += _shadow_lines(canary.get("shadow") or {})
    lines += _batch_lines(spec.get("batch"), status.get("batch"))
    lines.append("revisions:")
    for dep in sorted(deployments, key=lambda d: d["metadata"]["name"]):
        dep_labels = dep["metadata"].get("labels") or {}
        role = dep_labels.get(labels.LABEL_TRACK, "?")
        if dep_labels.get(labels.LABEL_COMPONENT) == labels.BATCH_COMPONENT:
            role = "batch"  # the stable revision's batch pool: no interactive traffic
        elif labels.LABEL_RETIRED in dep_labels:
            role = "previous"
        ready = (dep.get("status") or {}).get("readyReplicas") or 0
        replicas = (dep.get("spec") or {}).get("replicas", 0)
        lines.append(
            f"  {dep_labels.get(labels.LABEL_REVISION, '?'):<8} {role:<9} "
            f"{dep_labels.get(labels.LABEL_VERSION, 'embedded'):<14} "
            f"pods {ready}/{replicas} ready"
        )
    lines.append("conditions:")
    lines += [_condition_line(c) for c in status.get("conditions") or []]
    if events:
        lines.append("events:")
        recent = sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        for ev in recent[-8:]:
            lines.append(
                f"  {ev.get('type', ''):<8} {ev.get('reason', ''):<20} {ev.get('message', '')}"
            )
    return "\n".join(lines) + "\n"


def run_live(
    verb: str,
    name: str,
    connection: Connection,
    out: TextIO = sys.stdout,
    weight: int | None = None,
) -> int:
    """promote / abort / resume / set-weight / status against the cluster and namespace of
    ``connection`` (cli/connection.py: kubectl's rules)."""
    from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
    from docparser_operator.kube.client import ApiError, KubeClient

    namespace = connection.namespace
    client = KubeClient(connection.configuration, user_agent="docparser-operator-cli")
    try:
        dp = client.get(DOCPARSER, namespace, name)
        if dp is None:
            raise RolloutCommandError(f"DocParser {namespace}/{name} not found")
        if verb == "status":
            selector = labels.selector_string(labels.owned_selector(name))
            deployments = client.list(KNOWN_KINDS["Deployment"], namespace, selector=selector)
            events = [
                e
                for e in client.list(KNOWN_KINDS["Event"], namespace)
                if (e.get("involvedObject") or {}).get("uid") == dp["metadata"].get("uid")
            ]
            out.write(render_status(dp, deployments, events))
            return 0
        if verb == "promote":
            patch = promote_patch(dp)
        elif verb == "resume":
            patch = resume_patch(dp, resume_token())
        elif verb == "set-weight":
            patch = set_weight_patch(dp, -1 if weight is None else weight)
        else:
            patch = abort_patch(dp)
        client.request(
            "PATCH",
            DOCPARSER.path(namespace, name),
            query={"fieldManager": FIELD_MANAGER},
            body=patch,
            content_type="application/merge-patch+json",
        )
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    done = {"abort": "aborted", "set-weight": f"canary weight set to {weight}"}
    print(f"docparser.io/{name} {done.get(verb, verb + 'd')}", file=out)
    return 0
