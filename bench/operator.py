"""Operator benchmark: reconcile throughput and API cost, on the emulator or a real API server.

For 50 and 200 DocParsers it prints
- the time from creating them all until every one is reconciled (status.observedGeneration
  matches and all children exist),
- API requests per DocParser during that create phase (operator + kopf, test traffic excluded),
  and what they were (verb and kind, per DocParser: where a change saves requests),
- write requests during one full no-op resync of all DocParsers (target 0), and the
  operator's CPU seconds for that resync (the CPU time of the threads the operator started:
  kopf's event loop and its workers; not the recording proxy's, nor this script's own
  polling),
- non-watch requests per minute at rest (`--rest-window` seconds after everything settled;
  the issue's target: under 10 a minute at 100 DocParsers), and after a + the watches
  (re)opened in that window,
- the CPU seconds spent during the create phase by the operator's threads and, with
  `--backend apiserver`, by kube-apiserver, etcd and kube-controller-manager (from
  /proc/<pid>/stat of the harness's processes): whether "1,000 in 60 s" fits the machine's
  cores at all (2 cores: 120 CPU s in 60 s, for all of them together).

Run: .venv/bin/python bench/operator.py [--sizes 50 200] [--resync 5] [--backend apiserver]
`--backend apiserver` runs a real kube-apiserver + etcd (hack/controlplane, built by `make
controlplane`) behind the recording proxy every request of the operator goes through. The
emulator is in-process (one Python, shared GIL): its times are a lower bound on the operator's
own cost, not a cluster measurement.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "operator"))  # kube_cluster
sys.path.insert(0, str(ROOT / "tests" / "fakes"))  # kube_emulator, which kube_cluster serves


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--resync", type=float, default=5.0, help="timer interval (s)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase (s)")
    parser.add_argument("--backend", choices=("emulator", "apiserver"), default="emulator")
    parser.add_argument(
        "--rest-window",
        type=float,
        default=None,
        help="seconds counted at rest (default: two resync intervals, whole rounds; 0: skip)",
    )
    args = parser.parse_args()
    if args.rest_window is None:
        args.rest_window = 2 * args.resync
    os.environ["DOCPARSER_OPERATOR_RESYNC_INTERVAL_S"] = str(args.resync)
    os.environ["DOCPARSER_OPERATOR_RESYNC_INITIAL_DELAY_S"] = str(args.resync)
    import logging

    logging.disable(logging.WARNING)
    with backend(args.backend) as (make_cluster, processes):
        rows = [
            run_one(make_cluster, processes, n, args.timeout, args.rest_window) for n in args.sizes
        ]
    print()
    print(f"backend: {args.backend}, resync every {args.resync:g} s")
    print(
        "| DocParsers | time to all reconciled (s) | API requests / DocParser on create "
        "| writes / DocParser on create | writes in one no-op resync of all "
        "| operator CPU s for one no-op resync of all "
        "| non-watch requests / min at rest (by verb) "
        "| CPU s on create: operator | kube-apiserver | etcd | kube-controller-manager |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for n, secs, per_dp, writes_per_dp, noop, cpu, rest, create_cpu in rows:
        spent = " | ".join(
            "-" if create_cpu.get(who) is None else f"{create_cpu[who]:.1f}"
            for who in ("operator", *CONTROL_PLANE)
        )
        print(
            f"| {n} | {secs:.1f} | {per_dp:.1f} | {writes_per_dp:.1f} | {noop} | {cpu:.2f} "
            f"| {rest} | {spent} |"
        )
    load = os.getloadavg()
    print(
        f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"({os.cpu_count()} CPUs)"
    )
    return 0


CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager")
MakeCluster = Callable[[Path, str], Iterator[Any]]


@contextlib.contextmanager
def backend(name: str) -> Iterator[tuple[MakeCluster, dict[str, int]]]:
    """A factory of fresh clusters (one namespace each) on the chosen backend, and the pids
    of the control plane's processes by name (none for the emulator)."""
    from kube_cluster import emulator_cluster, proxied_cluster

    if name == "emulator":
        yield emulator_cluster, {}
        return
    sys.path.insert(0, str(ROOT / "hack"))
    from controlplane.harness import start_control_plane

    with start_control_plane() as cp:

        def make(tmp: Path, namespace: str) -> Iterator[Any]:
            gen = proxied_cluster("apiserver", Path(cp.kubeconfig), tmp, namespace)
            first = next(gen)
            first.has_garbage_collector = first.has_controllers = cp.controller_manager
            yield first
            yield from gen

        yield make, harness_pids(Path(cp.log_dir) if cp.log_dir else None)


def harness_pids(workdir: Path | None) -> dict[str, int]:
    """The pids of the harness's kube-apiserver, etcd and kube-controller-manager: the
    processes whose command line names the harness's work dir (their data, certs and
    kubeconfig live there), found in /proc (Linux), told apart by their binary's name."""
    if workdir is None:
        return {}
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile, or not ours to read
            continue
        binary = Path(argv[0].decode(errors="replace")).name
        if binary in CONTROL_PLANE and any(str(workdir).encode() in a for a in argv[1:]):
            found[binary] = int(proc.name)
    return found


def process_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system, all threads) of each process so far, from
    /proc/<pid>/stat; a process that ended is left out."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for who, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[who] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def at_rest(cluster: Any, window: float) -> str:
    """Non-watch requests per minute over `window` seconds of a settled cluster, by verb; the
    watches (re)opened in the window (kopf's renewals, the cordoned-node watch's) after a +."""
    if window <= 0:
        return "-"
    mark = cluster.mark()
    time.sleep(window)
    since = cluster.requests_since(mark)
    seen = [r for r in since if r.query.get("watch") not in ("1", "true")]
    watches = len(since) - len(seen)
    verbs = collections.Counter(r.method for r in seen)
    per_min = 60 * len(seen) / window
    detail = ", ".join(f"{verb} {60 * k / window:.0f}" for verb, k in verbs.most_common())
    renewed = f" + {watches} watch(es) renewed" if watches else ""
    return (f"{per_min:.0f} ({detail})" if seen else "0") + renewed


def thread_cpu(exclude: set[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process but ``exclude`` (native
    ids), from /proc (Linux): the operator runs in this process (kopf's runner thread), beside
    the recording proxy and the benchmark's own polling, which are left out."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        if tid in exclude:
            continue
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the threads spent between two ``thread_cpu`` readings (a thread started
    meanwhile counts whole; one that ended meanwhile is lost: kopf's workers are long-lived)."""
    return sum(t - before.get(tid, 0.0) for tid, t in after.items())


def by_kind(records: list[Any], n: int) -> str:
    """Requests per DocParser by verb and kind (``PATCH services``, ``PATCH docparsers/status``):
    where the create phase's requests go."""

    def what(r: Any) -> str:
        parts = [p for p in r.path.split("?")[0].split("/") if p]
        if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
            rest = parts[parts.index("namespaces") + 2 :]
        else:
            rest = parts[-2:] if len(parts) >= 2 else parts
        kind = rest[0]
        if rest[-1] == "status" and len(rest) == 3:
            kind += "/status"
        watch = " (watch)" if r.query.get("watch") in ("1", "true") else ""
        return f"{r.method} {kind}{watch}"

    counts = collections.Counter(what(r) for r in records)
    return ", ".join(f"{k} {v / n:.2f}" for k, v in counts.most_common())


def run_one(
    make_cluster: MakeCluster, processes: dict[str, int], n: int, timeout: float, window: float
) -> tuple[int, float, float, float, int, float, str, dict[str, float]]:
    from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
    from dp_helpers import GATEWAY, docparser, quiet
    from kube_cluster import wait_for
    from operator_runner import running_operator

    with tempfile.TemporaryDirectory() as tmp:
        gen = make_cluster(Path(tmp), f"bench-{n}")
        cluster = next(gen)
        import threading

        harness = {t.native_id for t in threading.enumerate() if t.native_id is not None}
        notes: list[str] = []  # printed after the run: kopf's runner holds stdout meanwhile
        try:
            with running_operator(cluster) as run:  # returns once the operator started
                start_mark = cluster.mark()
                threads_before, control_before = thread_cpu(harness), process_cpu(processes)
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

                # Listing every DocParser 4 times a second was the benchmark's own load: at 300
                # a list is 1.4 MB, 0.05 CPU s of kube-apiserver and 0.07 of this process
                # (whose GIL the operator shares), so at 1,000 about 0.8 CPU s a second of a
                # 2-core machine. Wait first for a status write of every DocParser in the
                # recorded requests (no request, a scan of memory), then list once a second.
                wait_for(
                    f"{n} status writes",
                    lambda: status_written(cluster.requests_since(start_mark), n),
                    timeout=timeout,
                    interval=0.25,
                )
                left = max(1.0, timeout - (time.monotonic() - t0))
                wait_for(f"{n} reconciled", reconciled, timeout=left, interval=1.0)
                elapsed = time.monotonic() - t0
                create_cpu = {"operator": cpu_between(threads_before, thread_cpu(harness))}
                create_cpu |= {
                    who: spent - control_before[who]
                    for who, spent in process_cpu(processes).items()
                    if who in control_before
                }
                notes.append(f"n={n}: CPU s during the create phase: {fmt_cpu(create_cpu)}")
                create_reqs = cluster.requests_since(start_mark)
                per_dp = len(create_reqs) / n
                writes_per_dp = sum(r.is_write for r in create_reqs) / n
                notes.append(f"n={n}: create requests per DocParser: {by_kind(create_reqs, n)}")

                # quiesce (the Deployment controllers done, nobody writing for 2 s), then
                # watch one full resync round over every DocParser
                quiet(cluster, seconds=2.0, timeout=timeout)
                mark = cluster.mark()

                def passes() -> dict[str, float]:
                    return {
                        dict(labels)["name"]: value
                        for (metric, labels), value in run.samples().items()
                        if metric == "docparser_operator_reconcile_seconds_count"
                    }

                before = passes()
                cpu_before = thread_cpu(harness)

                def full_round() -> bool:  # every DocParser reconciled again (the operator's
                    after = passes()  # /metrics: its reads no longer show as requests)
                    return sum(after.get(k, 0) > v for k, v in before.items()) >= n

                wait_for("one resync of all", full_round, timeout=timeout, interval=0.5)
                cpu = cpu_between(cpu_before, thread_cpu(harness))
                noop = cluster.writes_since(mark)
                noop_writes = len(noop)
                if noop:  # say what they were: a no-op resync should write nothing
                    kinds = collections.Counter(
                        f"{r.method} {r.path.split('/')[-3]}/status"
                        if r.path.endswith("/status")
                        else f"{r.method} {r.path.split('/')[-2]}"
                        for r in noop
                    )
                    notes.append(f"n={n}: writes during the no-op resync: {dict(kinds)}")
                rest = at_rest(cluster, window)
            for note in notes:  # before the teardown, which may fail on a loaded machine
                print(note, flush=True)
            print(
                f"n={n}: {elapsed:.1f}s, {per_dp:.1f} req/DocParser, noop writes={noop_writes}, "
                f"resync CPU {cpu:.2f}s, at rest {rest} req/min",
                flush=True,
            )
        finally:
            try:
                for _ in gen:
                    pass
            except Exception as exc:  # the figures are taken: say so, go on to the next size
                print(f"n={n}: the cluster's teardown failed: {exc!r}", flush=True)
    return n, elapsed, per_dp, writes_per_dp, noop_writes, cpu, rest, create_cpu


def status_written(records: list[Any], n: int) -> bool:
    """Whether each of the ``n`` DocParsers had a status PATCH among ``records``."""
    done = {
        parts[-2]
        for r in records
        if r.method == "PATCH" and (parts := r.path.split("?")[0].split("/"))[-1] == "status"
    }
    return len(done & {f"dp{i:04d}" for i in range(n)}) >= n


def fmt_cpu(spent: dict[str, float]) -> str:
    total = sum(spent.values())
    parts = ", ".join(f"{who} {s:.1f}" for who, s in spent.items())
    return f"{parts}; together {total:.1f}"


if __name__ == "__main__":
    raise SystemExit(main())
