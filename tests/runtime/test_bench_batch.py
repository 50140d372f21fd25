"""``bench/batch.py``: its arguments, its table and verdict, and its whole path in a tiny run.

The figures themselves are the benchmark's (docs/benchmarks.md), never asserted: the tiny run
checks that every phase produced its row (real servers, real Redis, a real batch) and that
the verdict lines are printed, whatever they say.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "batch.py"


def _load_bench():
    """Import the script as a module (``bench/`` is not a package)."""
    if "bench_batch" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_batch", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_batch"] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    return sys.modules["bench_batch"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests", "0"], "must be >= 1"),
        (["--slots", "8", "--batch-lines", "10"], "at least 2 x --slots"),
        (["--window-s", "0"], "--window-s and --timeout-s must be > 0"),
        (["--distinct-pages", "0"], "--distinct-pages"),
        (["--batch-yield", "gpu"], "--batch-yield takes distinct auto, rows or slots"),
        (["--batch-yield", "rows,rows"], "--batch-yield takes distinct auto, rows or slots"),
    ],
)
def test_bad_arguments_are_refused_with_the_flag_named(argv, message, capsys):
    bench = _load_bench()
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_redis_server_says_so_and_exits_2(monkeypatch, capsys):
    bench = _load_bench()
    monkeypatch.setattr(bench, "redis_binary", lambda: None)
    assert bench.main(["--requests", "1"]) == 2
    assert "redis-server not found" in capsys.readouterr().err


def test_the_table_pools_rounds_and_the_verdict_compares_ratios():
    bench = _load_bench()
    phases = [
        bench.Phase(
            "alone",
            "shared",
            latencies=[1.0, 1.0, 2.0],
            tokens=[10, 10, 10],
            queued=[0.01, 0.02, 0.03],
            engine=[0.5, 0.5, 0.6],
        ),
        bench.Phase("alone", "shared", latencies=[1.0], tokens=[10], queued=[0.01], engine=[0.4]),
        bench.Phase(
            "backlog",
            "shared",
            latencies=[1.0, 2.5],
            tokens=[10, 10],
            engine=[0.5, 0.7],
            pages=6,
            seconds=60.0,
            left=40,
        ),
        bench.Phase("no traffic", "shared", pages=30, seconds=60.0, left=20, device_s=54.0),
        bench.Phase("no traffic", "batch-only", pages=20, seconds=30.0, left=9, device_s=30.0),
    ]
    rows = [bench.row(bench.merge(phases, "alone", "shared")),
            bench.row(bench.merge(phases, "no traffic", "batch-only"))]  # fmt: skip
    assert rows[0][:8] == ["alone", "shared", "4", "1000", "2000", "30", "600", "10"]
    assert rows[0][8:] == ["-", "-", "-"]
    assert rows[1][8:] == ["40.0", "2400", "9"]  # 20 pages in 30 s, 30 s of the device's time
    text = bench.table(rows, markdown=True).splitlines()
    assert text[0] == "| " + " | ".join(bench.COLUMNS) + " |"
    assert len(text) == 4
    p99, engine, rate = bench.verdict(phases)
    assert "600 -> 700 ms (+16.7 %" in engine and "MISSED" in engine
    assert "p99 2000 -> 2500 ms (+25.0 %" in p99 and "MISSED" in p99
    assert "shared 30.0, batch-only 40.0 (75 %" in rate and "MISSED" in rate
    assert rate.endswith("per device-hour (engine-thread CPU time) 83 %")  # 2000 and 2400


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.redis
@pytest.mark.timeout(600)
def test_a_tiny_run_prints_every_phase_and_both_verdicts():
    bench = _load_bench()
    if bench.redis_binary() is None:
        pytest.skip("redis-server not installed (apt-get install redis-server / make system-deps)")
    argv = ["--requests", "2", "--rounds", "1", "--tokens", "4", "--batch-tokens", "4",
            "--batch-lines", "300", "--slots", "2", "--window-s", "2", "--distinct-pages", "2",
            "--gap-s", "0", "--markdown"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True,
                          timeout=540, env=env, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    phases = [("alone", "shared"), ("backlog", "shared"), ("no traffic", "shared"),
              ("no traffic", "batch-only")]  # fmt: skip
    assert [tuple(c[:2]) for c in cells] == phases
    assert cells[0][2] == cells[1][2] == "2"  # both interactive phases ran every request
    assert all(float(c[8]) > 0 for c in cells[2:])  # both pods ran batch lines
    assert "interactive p50" in proc.stdout and "batch pages/min with no interactive" in proc.stdout
