"""GPU pod-hours of one DocParser over a sample day of batch traffic: always on vs scale to zero.

The day (seeded, so every run prints the same table): a nightly invoice run (01:00, 2400 jobs
in 20 minutes), office hours (09:00-17:00, a job every 1-4 minutes), a backlog of scanned
archives dropped at 13:00 (600 jobs at once), and nothing else. The DocParser: `max: 4`,
autoscaling on the backlog (`target: 4` jobs per pod), one GPU per pod.

Both policies run the same simulated cluster in 10-second ticks: a pod serves
``--jobs-per-pod-minute`` jobs a minute once Ready, and is Ready ``--cold-start`` seconds after
it is created (a GPU pod's weights from the cache, model load and warm-up; an estimate until a
GPU run measures it, docs/benchmarks.md). The autoscaler is the HPA's behaviour as rendered
(scale up at once, down after 600 s of stabilization and one pod per 300 s). Scale to zero runs
the operator's own decision, ``core/plan/idle.py`` ``decide_idle``, on readings shaped as the
front's and the pods' /metrics would be every tick.

Run: .venv/bin/python bench/scale_to_zero.py [--after 5m 15m 60m] [--cold-start 150]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from docparser_operator.analysis.activity import Activity, PodReading  # noqa: E402
from docparser_operator.api.models import DocParserSpec  # noqa: E402
from docparser_operator.api.status_models import ScaleToZeroStatus  # noqa: E402
from docparser_operator.core.plan.idle import Seen, decide_idle, rfc3339  # noqa: E402

TICK_S = 10
DAY_S = 24 * 3600
T0 = 1_780_000_000.0  # a midnight, as unix seconds
MAX_PODS = 4
TARGET = 4  # autoscaling.target: jobs per pod
HPA_DOWN_WINDOW_S = 600
HPA_DOWN_STEP_S = 300


def sample_day(seed: int = 26) -> list[int]:
    """Jobs arriving in each tick of the day."""
    rng = random.Random(seed)
    arrivals = [0] * (DAY_S // TICK_S)
    night = 3600 // TICK_S
    for _ in range(2400):  # nightly invoice run, 01:00-01:20
        arrivals[night + rng.randrange(1200 // TICK_S)] += 1
    t = 9 * 3600
    while t < 17 * 3600:  # office hours: one job every 1-4 minutes
        arrivals[t // TICK_S] += 1
        t += rng.randint(60, 240)
    arrivals[13 * 3600 // TICK_S] += 600  # an archive backlog dropped at once
    return arrivals


@dataclass
class Cluster:
    """Pods (their creation times), the queue of jobs (arrival ticks), the jobs' waits."""

    cold_start_s: int
    per_pod_tick: float
    pods: list[int] = field(default_factory=list)  # creation tick of each pod
    queue: list[int] = field(default_factory=list)
    waits: list[tuple[int, int]] = field(default_factory=list)  # (arrival tick, wait s)
    credit: float = 0.0
    pod_ticks: int = 0
    served_last: int = 0

    def ready(self, tick: int) -> int:
        return sum(1 for born in self.pods if (tick - born) * TICK_S >= self.cold_start_s)

    def scale(self, want: int, tick: int) -> None:
        while len(self.pods) < want:
            self.pods.append(tick)
        if len(self.pods) > want:  # unready pods go first, then the youngest
            self.pods.sort(key=lambda born: (-born,))
            self.pods = self.pods[len(self.pods) - want :]

    def run(self, tick: int, arriving: int) -> None:
        self.queue += [tick] * arriving
        # this tick's capacity (a fraction of a job carries over; idle time banks nothing)
        self.credit = self.credit % 1 + self.ready(tick) * self.per_pod_tick
        served = min(len(self.queue), int(self.credit))
        self.credit -= served
        for arrived in self.queue[:served]:
            self.waits.append((arrived, (tick - arrived) * TICK_S))
        del self.queue[:served]
        self.served_last = served
        self.pod_ticks += len(self.pods)


class Hpa:
    """The rendered HPA's behaviour on the backlog metric, between ``floor`` and ``MAX_PODS``."""

    def __init__(self, floor: int) -> None:
        self.floor, self.size = floor, floor
        self.low_since: int | None = None
        self.last_down = -(10**9)

    def decide(self, backlog: int, tick: int) -> int:
        want = max(self.floor, min(MAX_PODS, math.ceil(backlog / TARGET)))
        if want >= self.size:
            self.size, self.low_since = want, None
            return self.size
        self.low_since = tick if self.low_since is None else self.low_since
        quiet = (tick - self.low_since) * TICK_S >= HPA_DOWN_WINDOW_S
        if quiet and (tick - self.last_down) * TICK_S >= HPA_DOWN_STEP_S:
            self.size, self.last_down = self.size - 1, tick
        return self.size


def always_on(arrivals: list[int], cluster: Cluster) -> Cluster:
    hpa = Hpa(floor=1)
    for tick, arriving in enumerate(arrivals):
        cluster.scale(hpa.decide(len(cluster.queue) + arriving, tick), tick)
        cluster.run(tick, arriving)
    return cluster


def scale_to_zero(arrivals: list[int], cluster: Cluster, after: str) -> tuple[Cluster, int]:
    """The operator's decision every tick; returns the cluster and how many wakes it made."""
    spec = DocParserSpec.model_validate(
        {
            "engine": "rapidocr",
            "runtime": {"image": "r:1", "redisUrlSecretRef": {"name": "redis"}},
            "replicas": {"min": 0, "max": MAX_PODS, "scaleToZero": {"after": after}},
            "autoscaling": {"metric": "backlog", "target": TARGET},
        }
    )
    hpa, seen, status, wakes, requests = Hpa(floor=1), Seen(), None, 0, 0.0
    for tick, arriving in enumerate(arrivals):
        now = T0 + tick * TICK_S
        requests += arriving
        ready = cluster.ready(tick)
        front = PodReading(requests=requests, queued=len(cluster.queue) + arriving)
        pods = PodReading(running=min(cluster.served_last, ready * TARGET))
        seen.record(Activity({"front": front, "pod": pods}), now)
        step = decide_idle(
            spec,
            ScaleToZeroStatus.model_validate(status) if status else None,
            seen,
            ready=ready,
            front_ready=True,
            analysis_running=False,
            now=rfc3339(now),
            poll_s=TICK_S,
        )
        wakes += step.state == "Waking" and (status or {}).get("state") == "Idle"
        status = step.to_status().to_wire()
        if step.state == "Idle":
            hpa = Hpa(floor=1)  # removed at zero, created again when awake
            cluster.scale(0, tick)
        else:
            size = hpa.decide(len(cluster.queue) + arriving, tick)
            cluster.scale(max(step.size, size) if step.state == "Awake" else step.size, tick)
        cluster.run(tick, arriving)
    return cluster, wakes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after", nargs="+", default=["5m", "15m", "60m"])
    parser.add_argument("--cold-start", type=int, default=150, help="GPU pod start (s)")
    parser.add_argument("--jobs-per-pod-minute", type=float, default=30.0)
    args = parser.parse_args()
    arrivals = sample_day()
    per_tick = args.jobs_per_pod_minute * TICK_S / 60

    def fresh() -> Cluster:
        return Cluster(cold_start_s=args.cold_start, per_pod_tick=per_tick)

    print(
        f"sample day: {sum(arrivals)} jobs; pod start {args.cold_start} s; "
        f"{args.jobs_per_pod_minute:g} jobs/min per pod; max {MAX_PODS} pods"
    )
    print(
        "| policy | GPU pod-hours | vs always on | wakes from 0 | batch job wait p50 / max (s) "
        "| office-hours job wait p50 / max (s) | 09:00's first job wait (s) |\n"
        "|---|---|---|---|---|---|---|"
    )
    base = always_on(arrivals, fresh())
    base_hours = base.pod_ticks * TICK_S / 3600
    rows = [("always on (min 1)", base, base_hours, "-")]
    for after in args.after:
        run, wakes = scale_to_zero(arrivals, fresh(), after)
        rows.append((f"scale to zero after {after}", run, run.pod_ticks * TICK_S / 3600, wakes))
    archive = 13 * 3600 // TICK_S
    for name, run, hours, wakes in rows:
        burst = [w for t, w in run.waits if t < 9 * 3600 // TICK_S or t == archive]
        lone = [w for t, w in run.waits if t >= 9 * 3600 // TICK_S and t != archive]
        first = min((t, w) for t, w in run.waits if t >= 9 * 3600 // TICK_S)[1]
        print(
            f"| {name} | {hours:.1f} | {100 * hours / base_hours:.0f} % | {wakes} | "
            f"{statistics.median(burst):.0f} / {max(burst):.0f} | "
            f"{statistics.median(lone):.0f} / {max(lone):.0f} | {first} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
