"""``docparser-runtime advise DIR``: tier distribution, recommendation, memory, replicas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import documents
import pytest
import tier_pages
from docparser_runtime import cli
from docparser_runtime.sizing import capacity

PYTHON = sys.executable


@pytest.fixture(scope="module")
def letters(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("letters")
    page = tier_pages.plain_letter().image
    (folder / "letter.png").write_bytes(documents.png_bytes(page))
    (folder / "nested").mkdir()
    page.save(folder / "nested" / "letter.jpg", "JPEG", quality=90)
    (folder / "notes.txt").write_text("not a document: ignored")
    return folder


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mixed")
    letter = documents.Doc(tier_pages.plain_letter().image)
    dense = documents.Doc(tier_pages.dense_two_columns_table().image)
    (folder / "both.pdf").write_bytes(documents.pdf_of([letter, dense], resolution=150))
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return folder


def advise_json(folder: Path, *extra: str, capsys) -> dict:
    assert cli.main(["advise", str(folder), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_folder_of_letters_gets_a_low_fixed_tier(letters, capsys) -> None:
    advice = advise_json(letters, capsys=capsys)
    assert advice["pages"] == 2 and advice["skipped"] == []
    assert [row["tier"] for row in advice["by_tier"]] == [0]
    rec = advice["recommended"]
    assert rec["tier"] == 0
    assert rec["tokens_saved_vs_top"] == pytest.approx(1 - 256 / 1120)
    assert rec["worst_case_memory_saved_vs_top"] > 0  # a fixed low tier shrinks the worst case


def test_mixed_pages_get_auto_and_the_broken_file_is_named(mixed, capsys) -> None:
    advice = advise_json(mixed, "--gpu-memory", "12Gi", capsys=capsys)
    assert advice["pages"] == 2
    assert [name for name, _ in advice["skipped"]] == ["broken.png"]
    tiers = {p["page"]: p["tier"] for p in advice["page_list"]}
    assert tiers[1] <= 1 and tiers[2] == 6
    assert advice["recommended"]["tier"] == "auto"
    # auto is sized at tier 6: the worst case is that of tier 6, and 12 GiB is too small
    memory = advice["gpu_memory"]
    assert memory["worst_case_gib"] == memory["tier_6_gib"]
    assert memory["fits"] is False
    fits = memory["largest_batch_that_fits"]
    assert 0 < fits < 8
    at = capacity.estimate_gpu_memory
    assert at("deepseek-ocr2", tier=6, max_batch_size=fits, max_new_tokens=4096).total <= 12 * 2**30
    assert at("deepseek-ocr2", tier=6, max_batch_size=fits + 1, max_new_tokens=4096).total > (
        12 * 2**30
    )


def test_replicas_are_marked_estimates_until_measured(mixed, capsys) -> None:
    estimated = advise_json(mixed, "--pages-per-hour", "50000", capsys=capsys)["throughput"]
    assert estimated["estimate"] is True
    assert estimated["replicas"] <= estimated["replicas_at_tier_6"]
    measured = advise_json(
        mixed, "--pages-per-hour", "50000", "--throughput", "0=4,6=1", capsys=capsys
    )["throughput"]
    assert measured["estimate"] is False
    # one page at 4 pages/s and one at 1: 2 pages in 1.25 s
    assert measured["pages_per_s_per_replica"] == pytest.approx(1.6)
    assert measured["replicas"] == 9  # 50000 / 3600 / 1.6 = 8.7


def test_table_output_through_the_installed_command(mixed) -> None:
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "docparser_runtime",
            "advise",
            str(mixed),
            "--gpu-memory",
            "80Gi",
            "--pages-per-hour",
            "10000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "recommended: tier auto" in out
    assert "gpuMemory 80Gi: fits" in out
    assert "ESTIMATE" in out
    assert "skipped broken.png" in out
    assert "\r[" not in proc.stderr  # no progress bar when stderr is not a terminal


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-memory", "lots"], "not a memory quantity"),
        (["--throughput", "6=fast"], "--throughput"),
        (["--throughput", "9=1"], "tier 0..6"),
        (["--engine", "tesseract"], "unknown engine"),
    ],
)
def test_bad_options_exit_2_with_a_reason(letters, args, message, capsys) -> None:
    assert cli.main(["advise", str(letters), *args]) == 2
    assert message in capsys.readouterr().err


def test_not_a_folder_and_an_empty_folder(tmp_path, capsys) -> None:
    assert cli.main(["advise", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert cli.main(["advise", str(tmp_path)]) == 1
    assert "no readable pages" in capsys.readouterr().out
