"""The race hunt (e2e/race_hunt.py) and its shuffled order (e2e/shuffle_order.py), on real
pytest runs of a small suite written here: the order a seed gives, the results read back from
pytest's junit report, and the table `make test-cluster-repeat` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
sys.path.insert(0, str(E2E))

from race_hunt import Hunt, hunt, junit_results, table  # noqa: E402
from shuffle_order import shuffled  # noqa: E402

SUITE = {
    "test_one.py": "".join(f"def test_{n}():\n    pass\n\n" for n in "abc"),
    "test_two.py": (
        "import os\n\n"
        "def test_flaky():\n"
        "    assert os.environ['DOCPARSER_SHUFFLE_SEED'] != '8', 'left behind by test_one'\n\n"
        "def test_skip():\n"
        "    import pytest\n"
        "    pytest.skip('no cluster here')\n"
    ),
}


def test_a_seed_keeps_modules_whole_and_gives_one_order() -> None:
    items = ["m1::a", "m1::b", "m1::c", "m2::x", "m2::y", "m3::z"]
    groups = [i.split("::")[0] for i in items]
    first = shuffled(items, groups, 7)
    assert shuffled(items, groups, 7) == first  # the seed reproduces the order
    assert sorted(first) == sorted(items)
    modules = [i.split("::")[0] for i in first]
    assert len([m for k, m in enumerate(modules) if k == 0 or modules[k - 1] != m]) == 3
    orders = {tuple(shuffled(items, groups, seed)) for seed in range(20)}
    assert len(orders) > 5  # seeds do shuffle


def _suite(tmp_path: Path) -> Path:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _run(tmp_path: Path, seed: int) -> tuple[list[str], str]:
    report = tmp_path / f"report-{seed}.xml"
    env = {**os.environ, "PYTHONPATH": str(E2E), "DOCPARSER_SHUFFLE_SEED": str(seed)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "shuffle_order",
         "-v", "--rootdir", str(tmp_path), "-c", os.devnull, f"--junitxml={report}",
         str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert f"shuffled order: DOCPARSER_SHUFFLE_SEED={seed}" in out.stdout, out.stdout
    ran = [
        line.split(" ")[0]
        for line in out.stdout.splitlines()
        if line.startswith("test_") and "::test_" in line
    ]
    return ran, report.read_text()


@pytest.mark.slow  # pytest processes: about 5 s each on a loaded 2-core machine
def test_the_plugin_runs_a_seeded_shuffle_and_the_report_reads_back(tmp_path: Path) -> None:
    _suite(tmp_path)
    ran, xml = _run(tmp_path, 8)
    again, _ = _run(tmp_path, 8)
    assert ran == again and len(ran) == 5
    assert [r.split("::")[0] for r in ran] in (
        ["test_one.py"] * 3 + ["test_two.py"] * 2,
        ["test_two.py"] * 2 + ["test_one.py"] * 3,
    )
    orders = {tuple(_run(tmp_path, seed)[0]) for seed in (1, 2)} | {tuple(ran)}
    assert len(orders) > 1
    assert junit_results(xml) == {
        "test_one::test_a": ("passed", ""),
        "test_one::test_b": ("passed", ""),
        "test_one::test_c": ("passed", ""),
        "test_two::test_flaky": (
            "failed",
            "AssertionError: left behind by test_one",
        ),
        "test_two::test_skip": ("skipped", "no cluster here"),
    }


@pytest.mark.slow
def test_the_table_names_each_scenario_its_passes_and_first_failure(tmp_path: Path) -> None:
    found = hunt(3, 6, [str(_suite(tmp_path)), "--rootdir", str(tmp_path), "-c", os.devnull])
    assert [code for _, _, code in found.runs] == [0, 0, 1]  # seeds 6, 7, 8
    assert found.failed
    lines = table(found).splitlines()
    assert lines[0].split() == ["scenario", "passed", "first", "failure"]
    rows = {line.split()[0]: line for line in lines[2:-1]}
    assert rows["test_one::test_a"].split()[1:] == ["3/3", "-"]
    flaky = rows["test_two::test_flaky"].split(None, 2)
    assert flaky[1:] == ["2/3", "run 3 (seed 8): AssertionError: left behind by test_one"]
    assert rows["test_two::test_skip"].split()[1:4] == ["0/3", "(3", "skipped)"]
    assert lines[-1] == "(3 runs: run 1 seed 6 exit 0, run 2 seed 7 exit 0, run 3 seed 8 exit 1)"


def test_a_long_message_is_cut_to_the_table() -> None:
    found = Hunt()
    found.add(1, 5, {"m::t": ("failed", "x" * 500)})
    found.runs.append((1, 5, 1))
    row = table(found).splitlines()[2]
    assert row.endswith("...") and len(row) < 160


@pytest.mark.parametrize("runs", ["0", "51"])
def test_the_run_count_is_bounded(runs: str) -> None:
    out = subprocess.run(
        [sys.executable, str(E2E / "race_hunt.py"), "--runs", runs, "--", "nothing"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "--runs: 1 to 50" in out.stderr
