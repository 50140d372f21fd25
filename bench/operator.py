"""Operator benchmark: reconcile throughput and API cost against the kmock-based emulator.

For 50 and 200 DocParsers it prints
- the time from creating them all until every one is reconciled (status.observedGeneration
  matches and all children exist),
- API requests per DocParser during that create phase (operator + kopf, test traffic excluded),
- write requests during one full no-op resync of all DocParsers (target 0).

Run: .venv/bin/python bench/operator.py [--sizes 50 200] [--resync 5]
The emulator is in-process (one Python, shared GIL), so absolute times are a lower bound on
the operator's own cost, not a cluster measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "operator"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--resync", type=float, default=5.0, help="timer interval (s)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase (s)")
    args = parser.parse_args()
    os.environ["DOCPARSER_OPERATOR_RESYNC_INTERVAL_S"] = str(args.resync)
    os.environ["DOCPARSER_OPERATOR_RESYNC_INITIAL_DELAY_S"] = str(args.resync)
    import logging

    logging.disable(logging.WARNING)
    rows = [run_one(n, args.timeout) for n in args.sizes]
    print()
    print(
        "| DocParsers | time to all reconciled (s) | API requests / DocParser on create "
        "| writes / DocParser on create | writes in one no-op resync of all |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n, secs, per_dp, writes_per_dp, noop in rows:
        print(f"| {n} | {secs:.1f} | {per_dp:.1f} | {writes_per_dp:.1f} | {noop} |")
    return 0


def run_one(n: int, timeout: float) -> tuple[int, float, float, float, int]:
    from docparser_operator.apply import DOCPARSER, KNOWN_KINDS
    from dp_helpers import GATEWAY, docparser
    from kube_cluster import emulator_cluster, wait_for
    from operator_runner import running_operator

    with tempfile.TemporaryDirectory() as tmp:
        gen = emulator_cluster(Path(tmp), "bench")
        cluster = next(gen)
        try:
            with running_operator(cluster):
                time.sleep(1.0)  # let kopf finish discovery and start its watches
                start_mark = cluster.mark()
                t0 = time.monotonic()
                for i in range(n):
                    spec = {"traffic": GATEWAY} if i % 2 else {}
                    dp = docparser(f"dp{i:04d}", **spec)
                    dp["metadata"]["namespace"] = cluster.namespace
                    cluster.client.apply(dp, manager="gitops")

                def reconciled() -> bool:
                    items = cluster.client.list(DOCPARSER, cluster.namespace)
                    done = [
                        d
                        for d in items
                        if (d.get("status") or {}).get("observedGeneration")
                        == d["metadata"]["generation"]
                    ]
                    if len(done) < n:
                        return False
                    deployments = cluster.client.list(KNOWN_KINDS["Deployment"], cluster.namespace)
                    return len(deployments) >= n

                wait_for(f"{n} reconciled", reconciled, timeout=timeout, interval=0.25)
                elapsed = time.monotonic() - t0
                create_reqs = cluster.requests_since(start_mark)
                per_dp = len(create_reqs) / n
                writes_per_dp = sum(r.is_write for r in create_reqs) / n

                # quiesce, then watch one full timer round over every DocParser
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    m = cluster.mark()
                    time.sleep(2.0)
                    if not cluster.writes_since(m):
                        break
                mark = cluster.mark()

                def full_round() -> bool:
                    seen = {
                        r.query.get("labelSelector", "")
                        for r in cluster.requests_since(mark)
                        if r.method == "GET" and r.path.endswith("/deployments")
                    }
                    return len([s for s in seen if "instance=dp" in s]) >= n

                wait_for("one resync of all", full_round, timeout=timeout, interval=0.5)
                noop_writes = len(cluster.writes_since(mark))
        finally:
            for _ in gen:
                pass
    print(
        f"n={n}: {elapsed:.1f}s, {per_dp:.1f} req/DocParser, noop writes={noop_writes}", flush=True
    )
    return n, elapsed, per_dp, writes_per_dp, noop_writes


if __name__ == "__main__":
    raise SystemExit(main())
