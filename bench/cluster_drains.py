"""Drains and node loss on the local 3-node cluster: drain time, failed requests, recovery.

Runs e2e/cluster/test_cluster_drains.py (five scenarios on one DocParser, paced load of 20
parses a second through its Service, a new connection per request) on the local cluster,
holding the cluster's lock for the whole run, and prints one table from the figures the
scenarios leave in /tmp/docparser-e2e-drain-figures.jsonl (docs/benchmarks.md):

- a drain: `kubectl drain` from start to end (evictions held back by the budget included);
- the node loss: the time from the loss to the last failed request (traffic recovered), and
  the marks on the way (Lease moved, NodeLost in status, a change reconciled, the dead
  endpoint gone, Ready capacity on the live nodes);
- failed requests of all sent during the transition, and the fewest Ready endpoints that
  any sample (every 0.5 s) saw behind the Service.

Run: .venv/bin/python bench/cluster_drains.py [-k EXPR] [--table-only]
(root, the local cluster's binaries and images built: `make cluster-images controlplane`;
a running cluster is reused, else one is started and stopped.)
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = Path(tempfile.gettempdir()) / "docparser-e2e-drain-figures.jsonl"
LOCK = Path("/tmp/docparser-localcluster.lock")
MARKS = (
    "leader_moved_s",
    "NodeLost_reported_s",
    "change_reconciled_s",
    "dead_endpoint_gone_s",
    "3_Ready_pods_on_live_nodes_s",
)


def run_scenarios(select: str | None) -> int:
    argv = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-s", "-q"]
    argv += [str(ROOT / "e2e" / "cluster" / "test_cluster_drains.py")]
    if select:
        argv += ["-k", select]
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the cluster is machine-wide: one user at a time
        # This tree's images (cached by content hash), built once the cluster is ours: the
        # image cache keeps one archive per image, so another tree's build may have replaced it.
        build = [sys.executable, str(ROOT / "scripts" / "build_images.py")]
        if subprocess.run(build, cwd=ROOT).returncode != 0:
            return 1
        return subprocess.run(argv, cwd=ROOT).returncode


def rows(since: str) -> list[dict[str, Any]]:
    if not FIGURES.exists():
        return []
    found = [json.loads(line) for line in FIGURES.read_text().splitlines() if line.strip()]
    return [f for f in found if f["at"] >= since]


def table(figures: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | drain | recovered after | failed / requests | fewest Ready endpoints "
        "| scenario time |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for f in figures:
        drain = f"{f['drain_s']} s" if "drain_s" in f else ""
        if "per_node_s" in f:
            drain += " (" + ", ".join(f"{v} s" for v in f["per_node_s"].values()) + ")"
        recovered = f"{f['recovery_s']} s" if "recovery_s" in f else ""
        took = f"{f['took_s']} s" if "took_s" in f else "(in the next row)"
        lines.append(
            f"| {f['scenario']} | {drain} | {recovered} | {f['failed']} / {f['requests']} "
            f"| {f['fewest_ready']} | {took} |"
        )
        marks = [f"{m.removesuffix('_s').replace('_', ' ')} {f[m]} s" for m in MARKS if m in f]
        if marks:
            notes.append(f"{f['scenario']}: " + ", ".join(marks) + f"; errors {f.get('errors')}")
        if "status_after" in f:
            notes.append(f"{f['scenario']}: {f['status_after']}")
    return "\n".join([*lines, "", *notes])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="select", help="pytest -k: only these scenarios")
    parser.add_argument(
        "--table-only", action="store_true", help="print the figures of the last run, run nothing"
    )
    args = parser.parse_args()
    since = "0"
    status = 0
    if not args.table_only:
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        status = run_scenarios(args.select)
    figures = rows(since)
    if args.table_only and figures:
        last_run = figures[-1]["at"][:13]  # the figures of the latest hour that has any
        figures = [f for f in figures if f["at"].startswith(last_run)]
    print(table(figures) if figures else f"no figures in {FIGURES}")
    return status


if __name__ == "__main__":
    sys.exit(main())
