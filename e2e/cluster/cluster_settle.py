"""A scenario's settled start: nothing is measured until the state it starts from holds.

A scenario that samples a transition (Ready endpoints, failed requests) reads every moment of
it against the size it starts with. Ready pods are not yet that: the EndpointSlice controller
publishes a newly Ready pod's endpoint a moment later, and kube-proxy writes it into the host's
Service rules later still (its 1 s minSyncPeriod at least, more on a busy 2-core node). A drain
once failed on its first sample, taken before any node was cordoned: 3 pods Ready, 2 endpoints
published. So every scenario begins with `settled_start`, which waits until, at one poll,

- every replica is Ready: the Service's pods (its selector, Terminating ones aside) are all
  Ready, as many as wanted (``replicas``, or what the Deployments behind the Service ask for),
  and those Deployments are at rest (current generation observed, no old pods left);
- the EndpointSlices' ready endpoints are exactly those pods' IPs;
- the host's Service rules (``iptables-save -t nat``: kube-proxy's DNAT targets for the
  Service's ClusterIP) send to exactly those IPs, where this host is a node (the local
  cluster); on another cluster the host's rules carry no traffic and are not read;
- the DocParser (when named) is at rest: Ready, not Progressing, its generation observed.

When it gives up, it says what it waited for, for how long, and what it last observed. The
checks are pure functions of what was read (`unmet`, `nat_destinations_by_cluster_ip`), so
tests/test_cluster_settle.py holds them to recorded inputs without a cluster.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster_support import Target

RULE = re.compile(r"^-A (?P<chain>\S+) (?P<rest>.*)$")
JUMP = re.compile(r"(?:^| )-j (?P<target>\S+)")
DESTINATION = re.compile(r"--to-destination \[?(?P<ip>[0-9a-fA-F.:]+?)\]?:[0-9]+(?:\s|$)")
CLUSTER_IP_RULE = re.compile(r"(?:^| )-d (?P<ip>[0-9a-fA-F.:]+)/(?:32|128) ")
# kube-proxy's per-Service chains a ClusterIP rule jumps to (cluster, local-only, external).
SERVICE_CHAIN = re.compile(r"^KUBE-(?:SVC|SVL|EXT|FW)-")
WHAT = (
    "every replica Ready, the EndpointSlice's ready endpoints == those pods' IPs, the host's "
    "Service rules sending to exactly them, the DocParser at rest"
)


def nat_destinations_by_cluster_ip(iptables_save: str) -> dict[str, set[str]]:
    """ClusterIP -> the pod IPs kube-proxy's nat rules send its new connections to.

    Follows each `-A KUBE-SERVICES -d <ClusterIP>/32 ... -j KUBE-SVC-…` rule through the
    Service chain's jumps (KUBE-SEP-… per endpoint) to their `-j DNAT --to-destination`; a
    ClusterIP without endpoints has no rule in the nat table (its REJECT is in filter) and so
    no entry. Masquerade marks and other non-chain jumps are not destinations."""
    chains: dict[str, list[str]] = {}
    for line in iptables_save.splitlines():
        match = RULE.match(line.strip())
        if match:
            chains.setdefault(match["chain"], []).append(match["rest"])

    def destinations(chain: str, depth: int) -> set[str]:
        found: set[str] = set()
        if depth > 4:  # SVC -> SEP is two; bounded against a loop in odd input
            return found
        for rest in chains.get(chain, []):
            target = JUMP.search(rest)
            if target is None:
                continue
            if target["target"] == "DNAT":
                dest = DESTINATION.search(rest)
                if dest:
                    found.add(dest["ip"])
            elif target["target"] in chains and not target["target"].startswith("KUBE-MARK-"):
                found |= destinations(target["target"], depth + 1)
        return found

    result: dict[str, set[str]] = {}
    for rest in chains.get("KUBE-SERVICES", []):
        ip, target = CLUSTER_IP_RULE.search(rest), JUMP.search(rest)
        if ip and target and SERVICE_CHAIN.match(target["target"]):
            result.setdefault(ip["ip"], set()).update(destinations(target["target"], 1))
    return result


def host_nat_rules() -> str:
    """The host's nat table as iptables-save prints it (root: the local cluster's host)."""
    out = subprocess.run(
        ["iptables-save", "-t", "nat"], capture_output=True, text=True, timeout=30
    )  # fmt: skip
    if out.returncode != 0:
        raise AssertionError(f"iptables-save: {out.stderr.strip()}")
    return out.stdout


def _ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _conditions(obj: dict[str, Any]) -> dict[str, str | None]:
    return {c["type"]: c.get("status") for c in (obj.get("status") or {}).get("conditions") or []}


def _selected(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class Observed:
    """One poll's reading of what the scenario starts from."""

    service: dict[str, Any]
    pods: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    deployments: list[dict[str, Any]]
    docparser: dict[str, Any] | None = None
    host_rules: dict[str, set[str]] | None = None  # None: the host's rules are not read

    @property
    def selector(self) -> dict[str, str]:
        return dict((self.service.get("spec") or {}).get("selector") or {})

    @property
    def cluster_ip(self) -> str:
        return str((self.service.get("spec") or {}).get("clusterIP") or "")

    def live_pods(self) -> list[dict[str, Any]]:
        """The Service's pods that are not leaving."""
        return [
            p
            for p in self.pods
            if _selected(p["metadata"].get("labels") or {}, self.selector)
            and not p["metadata"].get("deletionTimestamp")
        ]

    def ready_ips(self) -> set[str]:
        return {
            str(p["status"]["podIP"])
            for p in self.live_pods()
            if _ready(p) and (p.get("status") or {}).get("podIP")
        }

    def endpoint_ips(self) -> set[str]:
        return {
            str(address)
            for s in self.slices
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
            for address in e.get("addresses") or []
        }

    def backing(self) -> list[dict[str, Any]]:
        """The Deployments whose pods the Service selects."""
        return [
            d
            for d in self.deployments
            if _selected(
                ((d.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels")
                or {},
                self.selector,
            )
        ]

    def line(self) -> str:
        dp = self.docparser
        at_rest = "-"
        if dp is not None:
            conds = _conditions(dp)
            at_rest = (
                f"Ready={conds.get('Ready')} Progressing={conds.get('Progressing')} "
                f"observedGeneration {(dp.get('status') or {}).get('observedGeneration')}"
                f"/{dp['metadata'].get('generation')}"
            )
        rules: object = "not read"
        if self.host_rules is not None:
            rules = sorted(self.host_rules.get(self.cluster_ip, set()))
        deployments = {
            d["metadata"]["name"]: (
                f"{(d.get('status') or {}).get('readyReplicas', 0)}/"
                f"{(d.get('spec') or {}).get('replicas', 0)}"
            )
            for d in self.backing()
        }
        return (
            f"pods {len(self.live_pods())} ({len(self.ready_ips())} Ready: "
            f"{sorted(self.ready_ips())}); endpoints {sorted(self.endpoint_ips())}; host rules "
            f"for {self.cluster_ip or 'no ClusterIP'}: {rules}; deployments {deployments}; "
            f"DocParser {at_rest}"
        )


def unmet(seen: Observed, replicas: int | None = None) -> list[str]:
    """What of the settled start does not hold in `seen` (empty: it holds)."""
    problems: list[str] = []
    live, ready = seen.live_pods(), seen.ready_ips()
    backing = seen.backing()
    wanted = (
        replicas
        if replicas is not None
        else sum(int((d.get("spec") or {}).get("replicas", 0)) for d in backing)
    )
    if len(live) != wanted or len(ready) != wanted:
        problems.append(f"{len(ready)} Ready of {len(live)} pods, {wanted} wanted")
    for d in backing:
        spec_n = int((d.get("spec") or {}).get("replicas", 0))
        status = d.get("status") or {}
        if status.get("observedGeneration") != d["metadata"].get("generation") or any(
            int(status.get(k, 0)) != spec_n
            for k in ("replicas", "updatedReplicas", "readyReplicas")
        ):
            problems.append(f"Deployment {d['metadata']['name']} not at rest")
    if seen.endpoint_ips() != ready:
        problems.append("the EndpointSlice's ready endpoints are not the Ready pods' IPs")
    if seen.host_rules is not None and seen.host_rules.get(seen.cluster_ip, set()) != ready:
        problems.append("the host's Service rules do not send to exactly the Ready pods")
    if seen.docparser is not None:
        dp = seen.docparser
        status = dp.get("status") or {}
        conds = _conditions(dp)
        if (
            status.get("observedGeneration") != dp["metadata"].get("generation")
            or conds.get("Ready") != "True"
            or conds.get("Progressing") == "True"
        ):
            problems.append("the DocParser is not at rest")
    return problems


@dataclass
class Settled:
    """What the scenario starts from: the Ready pods' IPs, and how long reaching it took."""

    service: str
    ips: set[str]
    waited_s: float
    polls: int


def _read(
    target: Target, namespace: str, service: str, docparser: str | None, host: bool
) -> Observed:
    svc = target.get("service", service, namespace)
    selector = (svc.get("spec") or {}).get("selector") or {}
    # one kubectl for the pods, the slices and the Deployments: a poll is cheap on 2 cores
    kinds_read = "pods,endpointslices,deployments"
    found = json.loads(target.kubectl("-n", namespace, "get", kinds_read, "-o", "json"))["items"]
    kinds: dict[str, list[dict[str, Any]]] = {"Pod": [], "EndpointSlice": [], "Deployment": []}
    for item in found:
        kinds.setdefault(item.get("kind", ""), []).append(item)
    slices = [
        s
        for s in kinds["EndpointSlice"]
        if (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name") == service
    ]
    pods = kinds["Pod"] if selector else []
    dp = target.find("docparser", docparser, namespace) if docparser else None
    rules = nat_destinations_by_cluster_ip(host_nat_rules()) if host else None
    return Observed(svc, pods, slices, kinds["Deployment"], dp, rules)


def settled_start(
    target: Target,
    namespace: str,
    service: str,
    *,
    docparser: str | None = None,
    replicas: int | None = None,
    timeout: float = 120,
    interval: float = 0.2,
    reader: Callable[[], Observed] | None = None,
) -> Settled:
    """Wait until the scenario's starting state holds (module docstring); returns the Ready
    pods' IPs and the time it took, or fails saying what it waited for, how long, and what it
    last observed. Normally done in well under a second once the pods are Ready."""
    host = target.local
    read = reader or (lambda: _read(target, namespace, service, docparser, host))
    began = time.monotonic()
    deadline = began + timeout
    polls, last, problems = 0, None, ["not read yet"]
    while polls < 10_000:
        polls += 1
        last = read()
        problems = unmet(last, replicas)
        if not problems:
            took = time.monotonic() - began
            print(f"settled start of {namespace}/{service}: {took:.2f}s, {polls} polls")
            return Settled(service, last.ready_ips(), took, polls)
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    waited = time.monotonic() - began
    raise AssertionError(
        f"settled start of {namespace}/{service} not reached: waited {waited:.1f}s "
        f"({polls} polls) for {WHAT}"
        + (f" ({replicas} replicas)" if replicas is not None else "")
        + f"\nstill unmet: {'; '.join(problems)}"
        + f"\nlast observed: {last.line() if last else 'nothing'}\n{target.explain(namespace)}"
    )
