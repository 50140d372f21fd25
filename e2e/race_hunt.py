"""Runs a set of scenarios N times, each run in a new shuffled order, and prints one table.

    python e2e/race_hunt.py --runs 3 [--seed S] [--local-cluster] -- -m cluster e2e/cluster

`make test-cluster-repeat N=3` (the e2e/cluster scenarios, all runs on one local cluster) and
`make test-realcluster-repeat N=3` (the real-API-server transition tests) call it. Each run is
its own pytest process with DOCPARSER_SHUFFLE_SEED set to seed + run (e2e/shuffle_order.py
shuffles the modules and the tests inside them and prints the seed in its header), so a
failure that only shows after some other scenario comes with the seed that reproduces its
order. The table: each scenario, how many runs it passed, and its first failure's run, seed
and message. WHY a hunt on demand: a race that fails one run in ten passes review and CI
until the day it does not; N shuffled runs find it first, and the order one failed in.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED_ENV = "DOCPARSER_SHUFFLE_SEED"  # read by e2e/shuffle_order.py
MESSAGE_WIDTH = 110


@dataclass
class Outcome:
    """One scenario across the runs."""

    runs: int = 0
    passed: int = 0
    skipped: int = 0
    first_failure: str = ""  # "run R (seed S): message"


@dataclass
class Hunt:
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    runs: list[tuple[int, int, int]] = field(default_factory=list)  # (run, seed, exit code)

    def add(self, run: int, seed: int, results: dict[str, tuple[str, str]]) -> None:
        for scenario, (status, message) in results.items():
            outcome = self.outcomes.setdefault(scenario, Outcome())
            outcome.runs += 1
            if status == "passed":
                outcome.passed += 1
            elif status == "skipped":
                outcome.skipped += 1
            elif not outcome.first_failure:
                outcome.first_failure = f"run {run} (seed {seed}): {message}"

    @property
    def failed(self) -> bool:
        return any(o.first_failure for o in self.outcomes.values()) or any(
            code not in (0, 5)
            for _, _, code in self.runs  # 5: nothing collected
        )


def junit_results(xml_text: str) -> dict[str, tuple[str, str]]:
    """`module::test` -> (passed | failed | error | skipped, the first line of its message)
    from pytest's --junitxml report. A test with a failing teardown is reported twice by
    pytest (its call, then an error): the worse of the two wins."""
    results: dict[str, tuple[str, str]] = {}
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    for case in ET.fromstring(xml_text).iter("testcase"):
        module = (case.get("classname") or "").rsplit(".", 1)[-1]
        scenario = f"{module}::{case.get('name')}"
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = "failed" if child.tag == "failure" else child.tag
                text = child.get("message") or child.text or ""
                message = next((line for line in text.splitlines() if line.strip()), "")
                break
        if scenario not in results or rank[status] > rank[results[scenario][0]]:
            results[scenario] = (status, message.strip())
    return results


def table(hunt: Hunt) -> str:
    """The scenarios, their passes of their runs, and the first failure's message."""
    rows = [("scenario", "passed", "first failure")]
    for scenario, o in sorted(hunt.outcomes.items()):
        passes = f"{o.passed}/{o.runs}" + (f" ({o.skipped} skipped)" if o.skipped else "")
        failure = o.first_failure
        if len(failure) > MESSAGE_WIDTH:
            failure = failure[: MESSAGE_WIDTH - 3] + "..."
        rows.append((scenario, passes, failure or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}".rstrip() for r in rows]
    lines.insert(1, f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 13}")
    runs = ", ".join(f"run {r} seed {s} exit {c}" for r, s, c in hunt.runs)
    return "\n".join([*lines, f"({len(hunt.runs)} runs: {runs})"])


def _local_cluster(action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.localcluster", *action.split()],
        cwd=REPO / "hack",
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _cluster_running() -> bool:
    sys.path.insert(0, str(REPO / "hack"))
    from controlplane.localcluster.__main__ import DEFAULT_ROOT
    from controlplane.localcluster.configs import Layout
    from controlplane.localcluster.supervisor import load_state

    state = load_state(Layout(DEFAULT_ROOT))
    return bool(state and state.phase == "running")


def hunt(runs: int, seed: int, pytest_args: list[str]) -> Hunt:
    found = Hunt()
    paths = [str(REPO / "e2e"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    with tempfile.TemporaryDirectory(prefix="race-hunt-") as tmp:
        for run in range(1, runs + 1):
            run_seed = seed + run - 1
            report = Path(tmp) / f"run-{run}.xml"
            print(f"---- run {run}/{runs}: {SEED_ENV}={run_seed} ----", flush=True)
            command = [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "shuffle_order",
                f"--junitxml={report}", *pytest_args,
            ]  # fmt: skip
            code = subprocess.run(
                command, cwd=REPO, env={**env, SEED_ENV: str(run_seed)}
            ).returncode
            found.runs.append((run, run_seed, code))
            if report.exists():
                found.add(run, run_seed, junit_results(report.read_text()))
            print(table(found), flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None, help="first run's seed (random)")
    parser.add_argument(
        "--local-cluster",
        action="store_true",
        help="bring the local cluster up once for every run (and down after, if it was not up)",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 50:
        parser.error("--runs: 1 to 50")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    started_here = False
    if args.local_cluster and not _cluster_running():
        up = _local_cluster("up --timeout 600")
        print(up.stdout[-2000:], up.stderr[-2000:])
        if up.returncode != 0:
            return up.returncode
        started_here = True
    try:
        found = hunt(args.runs, seed, args.pytest_args)
    finally:
        if started_here:
            print(_local_cluster("down").stdout[-500:])
    print(f"\n==== race hunt: {args.runs} runs from seed {seed} ====\n{table(found)}")
    return 1 if found.failed else 0


if __name__ == "__main__":
    sys.exit(main())
