"""Helm chart: the CRD is an exact copy, RBAC covers exactly what the operator touches.

When a ``helm`` binary is available (``DOCPARSER_HELM``, ``PATH``, or the cached build in
``~/.cache/docparser/helm/<version>/helm``) the chart is also linted and rendered, and every
rendered object is validated with kubernetes-validate (strict, Kubernetes 1.30).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from docparser_operator import __version__
from docparser_operator.api.kinds import CHILD_KINDS, CHILD_VERBS, KINDS, KNOWN_KINDS
from docparser_operator.cli.main import render_resource

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "docparser-operator"
HELM_VERSION = "v3.22.0"
MUTATING = set(CHILD_VERBS)


def test_chart_crd_is_an_exact_copy_of_the_single_source() -> None:
    source = (REPO / "crds" / "docparser.yaml").read_bytes()
    copy = (CHART / "files" / "crds" / "docparser.yaml").read_bytes()
    assert copy == source, "run: cp crds/docparser.yaml charts/docparser-operator/files/crds/"
    assert not (CHART / "crds").exists(), "Helm never upgrades crds/: the CRD is a template"


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "docparser-operator"
    assert chart["appVersion"] == __version__


def _static_documents(template: Path) -> list[dict]:
    """A template's documents with Go-template lines dropped and inline actions neutralised."""
    lines = [
        re.sub(r"\{\{.*?\}\}", "placeholder", line)
        for line in template.read_text().splitlines()
        if not re.fullmatch(r"\s*\{\{.*\}\}\s*", line)
    ]
    return [d for d in yaml.safe_load_all("\n".join(lines)) if d]


def _operator_rules() -> list[dict]:
    roles = _static_documents(CHART / "templates" / "clusterrole.yaml")
    (main,) = [r for r in roles if r["metadata"]["name"] == "placeholder"]
    return main["rules"]


def _allowed(rules: list[dict], group: str, resource: str) -> set[str]:
    verbs: set[str] = set()
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            verbs |= set(rule["verbs"])
    return verbs


def _rendered_kinds() -> set[str]:
    kinds = set()
    for example in (REPO / "examples").glob("*.yaml"):
        kinds |= {o["kind"] for o in render_resource(yaml.safe_load(example.read_text()))}
    return kinds


def test_rbac_covers_every_rendered_kind() -> None:
    rules = _operator_rules()
    kinds = _rendered_kinds()
    assert kinds == set(CHILD_KINDS)  # the examples exercise every renderer
    for kind in kinds:
        ref = KNOWN_KINDS[kind]
        # A child read by name (the shadow's ConfigMap) is never listed or watched, and goes
        # with its owner by garbage collection only.
        want = MUTATING if ref.named is None else {"get", "create", "patch"}
        assert _allowed(rules, ref.group, ref.plural) == want, kind


def test_the_chart_grants_exactly_what_the_table_of_kinds_says() -> None:
    """api/kinds.py is the one table of what the operator does with each kind; the chart's
    ClusterRoles are YAML, so they are held to it here (a new kind is one edit, then this)."""
    roles = _static_documents(CHART / "templates" / "clusterrole.yaml")
    rules = [rule for role in roles for rule in role["rules"]]
    for ref in KINDS:
        assert _allowed(rules, ref.group, ref.plural) == set(ref.verbs), ref.kind


def test_rbac_is_least_privilege() -> None:
    rules = _operator_rules()
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    assert _allowed(rules, "", "pods") == {"get", "list", "watch"}
    # Secrets: create only (the shadow's internal token, never read back).
    assert _allowed(rules, "", "secrets") == {"create"}
    # ConfigMaps: golden documents and <name>-shadow, by name; never listed or watched.
    assert _allowed(rules, "", "configmaps") == {"get", "create", "patch"}
    assert _allowed(rules, "docparser.io", "docparsers") == {"get", "list", "watch", "patch"}
    assert "patch" in _allowed(rules, "docparser.io", "docparsers/status")
    assert _allowed(rules, "", "events") == {"create", "patch"}


def _helm() -> str | None:
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cached = cache_root / "docparser" / "helm" / HELM_VERSION / "helm"
    for candidate in (os.environ.get("DOCPARSER_HELM"), shutil.which("helm"), str(cached)):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


HELM = _helm()
needs_helm = pytest.mark.skipif(
    HELM is None,
    reason=(
        "helm not found: run scripts/build-helm.sh (builds the pinned helm into "
        f"~/.cache/docparser/helm/{HELM_VERSION}), put helm on PATH, or set DOCPARSER_HELM"
    ),
)


def _template(*args: str) -> list[dict]:
    result = subprocess.run(
        [
            HELM,
            "template",
            "ocr",
            str(CHART),
            "--namespace",
            "docparser-system",
            "--kube-version",
            "1.30.0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@needs_helm
def test_helm_lint() -> None:
    result = subprocess.run(
        [HELM, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
def test_helm_template_all_namespaces_is_valid() -> None:
    objects = _template()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "Deployment",
            "Role",  # the leader-election Lease
            "RoleBinding",
        ]
    )
    for obj in objects:
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    (crd,) = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    source = yaml.safe_load((REPO / "crds" / "docparser.yaml").read_text())
    assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    labels = crd["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "Helm"  # the release owns it
    assert labels["app.kubernetes.io/part-of"] == "docparser"
    crd["metadata"]["labels"] = source["metadata"]["labels"]
    assert crd == source
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["run"]
    assert container["image"] == f"ghcr.io/docparser/docparser-operator:{__version__}"
    (role,) = [
        o
        for o in objects
        if o["kind"] == "ClusterRole" and not o["metadata"]["name"].endswith("-discovery")
    ]
    assert role["rules"] == _operator_rules()


@needs_helm
def test_helm_template_crd_modes() -> None:
    """crds.install renders the CRD on install and upgrade alike (a template, not crds/);
    crds.keep protects it from `helm uninstall`; install=false leaves it to GitOps."""

    def crds(*args: str) -> list[dict]:
        return [o for o in _template(*args) if o["kind"] == "CustomResourceDefinition"]

    assert crds("--set", "crds.install=false") == []
    (unkept,) = crds("--set", "crds.keep=false")
    assert "helm.sh/resource-policy" not in (unkept["metadata"].get("annotations") or {})
    kubernetes_validate.validate(unkept, "1.30.0", strict=True)


@needs_helm
def test_helm_template_watching_namespaces_binds_per_namespace() -> None:
    objects = _template("--set", "watchNamespaces={ocr,batch}")
    bindings = [
        o for o in objects if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["batch", "ocr"]
    cluster_bindings = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert [b["roleRef"]["name"] for b in cluster_bindings] == ["ocr-docparser-operator-discovery"]
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["run", "--namespace", "ocr", "--namespace", "batch"]


@needs_helm
def test_helm_template_two_replicas_share_a_lease() -> None:
    """Leader election by default: 2 replicas rolled without a gap, a Role for leases only in
    the release namespace; disabled, exactly one replica replaced with Recreate."""
    objects = _template()
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DOCPARSER_OPERATOR_LEADER_ELECT"]["value"] == "true"
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]
    single = _template("--set", "leaderElection.enabled=false")
    (dep,) = [o for o in single if o["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert not [o for o in single if o["kind"] == "Role"]


@needs_helm
@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("replicaCount=0", "replicaCount"),
        ("logLevel=LOUD", "logLevel"),
        ("watchNamespaces={Bad_NS}", "watchNamespaces"),
        ("imagePullPolicy=Never", "imagePullPolicy"),  # a typo of image.pullPolicy
        ("analysis.prometheusURLs={http://me@prometheus:9090/}", "prometheusURLs"),
    ],
)
def test_values_schema_rejects_bad_values(flag: str, complaint: str) -> None:
    """values.schema.json: a wrong value fails `helm install`/`template` with the field named,
    instead of rendering an operator that fails later."""
    result = subprocess.run(
        [HELM, "template", "ocr", str(CHART), "--set", flag],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert complaint in result.stderr, result.stderr


@needs_helm
def test_helm_template_operator_metrics_and_pod_monitor() -> None:
    """/metrics on a named port with the prometheus.io annotations by default; a PodMonitor
    selecting the operator's pods when asked (Prometheus Operator users)."""
    objects = _template()
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DOCPARSER_OPERATOR_METRICS_PORT"] == "8081"
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8081"
    assert not [o for o in objects if o["kind"] == "PodMonitor"]
    monitored = _template("--set", "metrics.podMonitor.enabled=true")
    (monitor,) = [o for o in monitored if o["kind"] == "PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


@needs_helm
def test_helm_template_golden_sources_and_volume() -> None:
    """golden.sources reaches the operator's allow-list; golden.volume is mounted read-only
    at /golden (where the default source points), and nothing is mounted without one."""
    objects = _template()
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DOCPARSER_OPERATOR_GOLDEN_SOURCES"] == "file:///golden/{namespace}/"
    assert "volumeMounts" not in container and "volumes" not in dep["spec"]["template"]["spec"]
    mounted = _template(
        "--set",
        "golden.volume.persistentVolumeClaim.claimName=golden-sets",
        "--set",
        "golden.sources={file:///golden/,s3://qa-golden/}",
    )
    (dep,) = [o for o in mounted if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DOCPARSER_OPERATOR_GOLDEN_SOURCES"] == "file:///golden/,s3://qa-golden/"
    assert container["volumeMounts"] == [
        {"name": "golden", "mountPath": "/golden", "readOnly": True}
    ]
    assert pod["volumes"] == [
        {"name": "golden", "persistentVolumeClaim": {"claimName": "golden-sets"}}
    ]


@needs_helm
def test_helm_template_prometheus_urls() -> None:
    """analysis.prometheusURLs reaches the operator's PromQL allow-list; empty by default, so
    no DocParser can make the operator query anything until an admin lists a Prometheus."""

    def env_of(*args: str) -> dict[str, str | None]:
        (dep,) = [o for o in _template(*args) if o["kind"] == "Deployment"]
        container = dep["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}

    assert env_of()["DOCPARSER_OPERATOR_PROMETHEUS_URLS"] == ""
    urls = "{http://prometheus-operated.monitoring.svc:9090/,https://thanos.example/prom/}"
    env = env_of("--set", f"analysis.prometheusURLs={urls}")
    assert env["DOCPARSER_OPERATOR_PROMETHEUS_URLS"] == urls.strip("{}")


def test_values_schema_holds_the_prometheus_allow_list() -> None:
    """Without helm too: the defaults validate, and an entry with userinfo, a query or another
    scheme is refused by the schema before the operator would refuse it at start-up."""
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)
    assert values["analysis"]["prometheusURLs"] == []
    good = ["http://prometheus-operated.monitoring.svc:9090/", "https://thanos.example/prom"]
    jsonschema.validate({**values, "analysis": {"prometheusURLs": good}}, schema)
    for bad in ("http://me@prometheus:9090/", "prometheus:9090", "http://p:9090/?q=1", "ftp://p/"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**values, "analysis": {"prometheusURLs": [bad]}}, schema)


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found (Debian package prometheus)")
def test_alert_rules_fire_on_their_series() -> None:
    """`promtool test rules`: each alert fires on what it is about, after its `for`, not before."""
    here = REPO / "tests" / "operator" / "promtool"
    rules = CHART / "files" / "prometheus-rules.yaml"
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yaml"],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
def test_helm_template_prometheus_rule_carries_the_tested_rules() -> None:
    objects = _template("--set", "metrics.prometheusRule.enabled=true")
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == rules
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"DocParserRolloutStuck", "DocParserGPUMemoryHigh", "DocParserOOMKilled"} <= alerts


def _exposed_names() -> set[str]:
    """Every series name the runtime and the operator can expose (with the suffixes the
    exposition adds), from their own registries."""
    from docparser_operator.controller.metrics import OperatorMetrics
    from docparser_runtime.server.endpoints.jobs.serving import JobMetrics
    from docparser_runtime.server.ops.metrics import Metrics

    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "info": ("_info",),
        "gauge": ("",),
    }
    runtime = Metrics()
    JobMetrics(runtime)  # the job metrics join the same registry in the app
    names = set()
    for registry in (runtime.registry, OperatorMetrics.create().registry):
        for family in registry.collect():
            names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return names


def test_dashboard_queries_parse_and_name_real_metrics(tmp_path: Path) -> None:
    """Every panel query is valid PromQL (promtool parses it as a recording rule) and every
    docparser metric it names is one the runtime or the operator exposes."""
    dashboard = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 8
    used = {m for e in exprs for m in re.findall(r"\b(docparser_[a-z_]+)\b", e)}
    assert used - _exposed_names() == set()
    if PROMTOOL is None:
        pytest.skip("promtool not found (Debian package prometheus): PromQL syntax not checked")
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


@needs_helm
def test_helm_template_grafana_dashboard_configmap() -> None:
    objects = _template("--set", "metrics.grafanaDashboard.enabled=true")
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    assert json.loads(cm["data"]["docparser.json"]) == dashboard
