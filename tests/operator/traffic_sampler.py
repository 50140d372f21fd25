"""Samples a DocParser's traffic objects while it changes and records every unsafe moment.

Every ``interval`` seconds it reads what routes traffic and the pods behind it. What routes
traffic is read from the cluster, never from the spec: while an HTTPRoute exists the gateway
sends through its weighted backends (also for the moment after a switch back to ``router:
service`` and before the operator removes it); without one, the endpoint Service does. It
records a violation when

- a backend with weight > 0, or the endpoint Service, has no Ready pod behind it, or
- the Ready pods behind traffic fall below ``floor`` (the DocParser's size; one less with
  ``rollout.maxSurge: 0``) after the DocParser first reached it.

With ``gitops`` (a hack/gitopscheck ``GitOpsCheck``), each sample also reads the DocParser and
asks Flux's kstatus and Argo CD's health script what they make of it, and records a violation
when they disagree (Current/Healthy, InProgress/Progressing, Failed/Degraded) or when either
says Failed: every walk sampled here is a healthy one.

A sampler starts from a settled start (`settled_start`, unless ``settled=False``): the
DocParser at rest (Ready, not Progressing, its generation observed), every pod its
Deployments ask for present and Ready, and ``floor`` Ready pods behind traffic. WHY: the
first samples are the moment a transition is measured against; a sampler begun while the
last change still settled read the scenario's starting state, not the transition's.

The reads of one sample are not atomic, so pods are listed before and after the traffic
objects, and a pod counts as Ready when either list shows it Ready: a backend that lost its
last Ready pod during the whole sample is still caught, a backend that gained its first one
between two reads is not a false alarm. The HTTPRoute is read again at the end: a sample
during which it came or went is read again, since neither entry point held throughout.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from gitopscheck.checker import AGREEING, GitOpsCheck
from kube_cluster import Cluster

ROUTE, SERVICE, POD = KNOWN_KINDS["HTTPRoute"], KNOWN_KINDS["Service"], KNOWN_KINDS["Pod"]
DEPLOY = KNOWN_KINDS["Deployment"]


def _ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def unsettled(
    dp: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    deployments: list[dict[str, Any]],
    behind: int,
    floor: int,
) -> list[str]:
    """What of the settled start does not hold (empty: it holds): the DocParser at rest,
    as many live pods as its Deployments ask for and all of them Ready, ``floor`` behind
    traffic."""
    problems = []
    status = (dp or {}).get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    generation = (dp or {}).get("metadata", {}).get("generation")
    if (
        dp is None
        or status.get("observedGeneration") != generation
        or conds.get("Ready") != "True"
        or conds.get("Progressing") == "True"
    ):
        problems.append(
            f"the DocParser not at rest (Ready={conds.get('Ready')} "
            f"Progressing={conds.get('Progressing')} observedGeneration "
            f"{status.get('observedGeneration')}/{generation})"
        )
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    wanted = sum(int((d.get("spec") or {}).get("replicas", 0)) for d in deployments)
    ready = sum(1 for p in live if _ready(p))
    if len(live) != wanted or ready != wanted:
        problems.append(f"{ready} Ready of {len(live)} pods, {wanted} wanted")
    if behind < floor:
        problems.append(f"{behind} Ready pods behind traffic < {floor}")
    return problems


def settled_start(
    cluster: Cluster, name: str, floor: int, timeout: float = 60, interval: float = 0.1
) -> float:
    """Wait for the settled start (module docstring); the seconds it took. On giving up it
    says what it waited for, how long, and what it last saw."""
    began = time.monotonic()
    probe = TrafficSampler(cluster, name, floor, settled=False)
    problems: list[str] = ["not read yet"]
    for _ in range(int(timeout / interval) + 1):
        try:
            behind = probe.sample().behind
        except Exception as exc:  # an object replaced between reads: read again
            problems = [repr(exc)]
        else:
            problems = unsettled(
                cluster.get(DOCPARSER, name),
                cluster.list(POD, f"app.kubernetes.io/instance={name}"),
                cluster.list(DEPLOY, f"app.kubernetes.io/instance={name}"),
                behind,
                floor,
            )
            if not problems:
                return time.monotonic() - began
        if time.monotonic() - began >= timeout:
            break
        time.sleep(interval)
    raise AssertionError(
        f"settled start of {name} not reached: waited {time.monotonic() - began:.1f}s for the "
        f"DocParser at rest, every pod Ready, {floor} behind traffic; last: {'; '.join(problems)}"
    )


@dataclass
class Sample:
    at: float
    behind: int  # Ready pods behind traffic
    backends: dict[str, tuple[int, int]]  # service -> (weight, Ready pods behind it)
    verdict: tuple[str, str] | None = None  # (kstatus, Argo CD health) with ``gitops``


@dataclass
class TrafficSampler:
    cluster: Cluster
    name: str
    floor: int
    interval: float = 0.5
    max_samples: int = 2000
    gitops: GitOpsCheck | None = None
    settled: bool = True  # __enter__ waits for the settled start first
    samples: list[Sample] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    settled_s: float | None = None  # how long the settled start took
    _serving: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> TrafficSampler:
        if self.settled:
            self.settled_s = settled_start(self.cluster, self.name, self.floor)
        self._thread = threading.Thread(target=self._loop, name="traffic-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.samples) < self.max_samples:
            try:
                self.sample()
            except Exception as exc:  # an object deleted between reads: sample again
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)

    def _ready_pods(self) -> dict[str, dict[str, str]]:
        # the runtime pods and, for a DocParser that scales to zero, its front's
        pods = self.cluster.list(POD, f"app.kubernetes.io/instance={self.name}")
        return {p["metadata"]["uid"]: p["metadata"]["labels"] for p in pods if _ready(p)}

    def sample(self) -> Sample:
        for _ in range(3):
            sample = self._read()
            if sample is not None:
                return sample
        raise RuntimeError("the HTTPRoute came or went during three reads in a row")

    def _read(self) -> Sample | None:
        """One sample, or None when the HTTPRoute appeared or vanished between the first and
        the last read (the entry point moved mid-sample: neither view held throughout)."""
        before = self._ready_pods()
        route = self.cluster.get(ROUTE, self.name)
        router = "gateway" if route is not None else "service"
        if route is not None:
            rules = route.get("spec", {}).get("rules") or [{}]
            backends = {b["name"]: b.get("weight", 1) for b in rules[0].get("backendRefs") or []}
        else:  # router service, or a switch to gateway before its route exists: the Service
            backends = {self.name: 100}
        selectors = {}
        for service in backends:
            svc = self.cluster.get(SERVICE, service)
            selectors[service] = ((svc or {}).get("spec") or {}).get("selector") or None
        after = self._ready_pods()
        if (self.cluster.get(ROUTE, self.name) is None) != (route is None):
            return None
        ready = {**before, **after}
        counts = {}
        for service, selector in selectors.items():
            counts[service] = sum(
                1
                for labels in ready.values()
                if selector and all(labels.get(k) == v for k, v in selector.items())
            )
        behind = sum(n for s, n in counts.items() if backends[s] > 0)
        sample = Sample(time.monotonic(), behind, {s: (backends[s], counts[s]) for s in backends})
        self.samples.append(sample)
        if self._serving:
            seen = f"(router {router}, backends {sample.backends}, selectors {selectors})"
            for service, (weight, n) in sample.backends.items():
                if weight > 0 and n == 0:
                    self.violations.append(f"{service} weighted {weight} with 0 Ready pods {seen}")
            if behind < self.floor:
                self.violations.append(f"{behind} Ready pods behind traffic < {self.floor} {seen}")
        self._serving = self._serving or behind >= self.floor
        if self.gitops is not None:
            self._judge(sample)
        return sample

    def _judge(self, sample: Sample) -> None:
        dp = self.cluster.get(DOCPARSER, self.name)
        if dp is None:
            return
        flux, message = self.gitops.kstatus(dp) if self.gitops else ("", "")
        argo = self.gitops.argocd_health(dp)[0] if self.gitops else ""
        sample.verdict = (flux, argo)
        if AGREEING.get(flux) != argo:
            self.violations.append(f"Flux says {flux} but Argo CD {argo}: {message}")
        if flux == "Failed" or argo == "Degraded":
            self.violations.append(f"{flux}/{argo} during a healthy walk: {message}")

    def verdicts(self) -> set[tuple[str, str]]:
        return {s.verdict for s in self.samples if s.verdict is not None}

    def report(self) -> str:
        span = self.samples[-1].at - self.samples[0].at if self.samples else 0.0
        return (
            f"{len(self.samples)} samples over {span:.1f}s, {len(self.violations)} violations"
            f"{': ' + '; '.join(self.violations[:5]) if self.violations else ''}"
        )
