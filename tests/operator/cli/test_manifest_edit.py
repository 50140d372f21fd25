"""`promote -f` / `resume -f` / `set-weight -f` keep the file a GitOps user commits: the diff is
the change itself (values moved into stable, the canary block gone, one resume or weight line),
never a rewrite of comments, key order, flow maps or quoting; other documents of a stream
stay byte for byte. Run through the real CLI on the commented examples and a multi-document
file."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from docparser_operator.cli.main import main
from docparser_operator.cli.rollout import promoted

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
WITH_CANARY = sorted(
    p.name for p in EXAMPLES.glob("*.yaml") if (yaml.safe_load(p.read_text())["spec"]).get("canary")
)


@dataclass
class Ran:
    returncode: int
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """The CLI's entry point in this process (the same main() the console script calls; a
    subprocess per call would cost seconds of imports on a busy machine)."""

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = main(list(args))
        return Ran(code, capsys.readouterr().err)

    return run


def changes(before: str, after: str) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """(deleted lines, (old, new) replaced line pairs, inserted lines) of a line diff."""
    a, b = before.splitlines(), after.splitlines()
    deleted, replaced, inserted = [], [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "delete":
            deleted += a[i1:i2]
        elif tag == "insert":
            inserted += b[j1:j2]
        elif tag == "replace":
            if i2 - i1 != j2 - j1:  # a block that is not a line-for-line value change
                deleted += a[i1:i2]
                inserted += b[j1:j2]
            else:
                replaced += list(zip(a[i1:i2], b[j1:j2], strict=True))
    return deleted, replaced, inserted


def canary_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("  canary:")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), None)
    return lines[start:end]


def key_of(line: str) -> tuple[int, str]:
    stripped = line.lstrip()
    return len(line) - len(stripped), stripped.split(":", 1)[0]


@pytest.mark.parametrize("example", WITH_CANARY)
def test_a_promotion_diff_is_the_promotion(
    example: str, tmp_path: Path, cli: Callable[..., Ran]
) -> None:
    before = (EXAMPLES / example).read_text()
    path = tmp_path / example
    path.write_text(before)
    result = cli("promote", "-f", str(path))
    assert result.returncode == 0, result.stderr
    after = path.read_text()
    assert yaml.safe_load(after) == promoted(yaml.safe_load(before))
    # Without the canary block, the file keeps every line but the values the canary moved
    # into stable: the same line, indentation and key, and its comment if it had one.
    block = canary_block(before)
    rest = [line for line in before.splitlines() if line not in block]
    lines = after.splitlines()
    assert len(rest) == len(lines), changes(before, after)
    canary = yaml.safe_load(before)["spec"]["canary"]
    moved = set(canary.get("weights") or {}) | set(canary.get("runtime") or {})
    differ = [(old, new) for old, new in zip(rest, lines, strict=True) if old != new]
    assert differ, "nothing moved"
    for old, new in differ:
        assert key_of(old) == key_of(new) and key_of(old)[1] in moved, (old, new)
        assert old.partition("#")[2] == new.partition("#")[2], (old, new)


def test_other_documents_stay_byte_for_byte(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    gateway = (EXAMPLES / "deepseek-gateway-canary.yaml").read_text()
    other = (EXAMPLES / "deepseek-service-router.yaml").read_text()  # a canary too: it stays
    secret = (
        "# keys for the gateway\napiVersion: v1\nkind: Secret\n"
        "metadata: {name: ocr-keys}\nstringData: {key: 'x'}\n"
    )
    stream = f"---\n{secret}--- # the DocParser\n{gateway}---\n{other}...\n"
    path = tmp_path / "stream.yaml"
    path.write_text(stream)
    result = cli("promote", "-f", str(path), "invoices")
    assert result.returncode == 0, result.stderr
    after = path.read_text()
    assert after.startswith(f"---\n{secret}--- # the DocParser\n")
    assert after.endswith(f"---\n{other}...\n")  # the other canary stays, untouched
    docs = list(yaml.safe_load_all(after))
    assert docs[1] == promoted(yaml.safe_load(gateway)) and docs[2] == yaml.safe_load(other)
    result = cli("promote", "-f", str(path))  # all the rest: the second one
    assert result.returncode == 0 and "contracts" in result.stderr, result.stderr
    assert after.startswith(path.read_text().split("--- # the DocParser")[0])


def test_resume_and_set_weight_change_one_line(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    before = (EXAMPLES / "rapidocr-runtime-canary.yaml").read_text()
    before_paused = before  # the file a team commits; status says Paused in the cluster
    path = tmp_path / "dp.yaml"
    path.write_text(before_paused)
    result = cli("resume", "-f", str(path))
    assert result.returncode == 0, result.stderr
    deleted, replaced, inserted = changes(before_paused, path.read_text())
    assert (deleted, replaced) == ([], [])
    assert len(inserted) == 1 and inserted[0].strip().startswith("resume: ")
    assert inserted[0].startswith("      resume:")  # under analysis, at its indentation

    manual = (EXAMPLES / "deepseek-gateway-canary.yaml").read_text()
    path.write_text(manual)
    result = cli("set-weight", "invoices", "40", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert changes(manual, path.read_text()) == ([], [("    weight: 10", "    weight: 40")], [])
    refused = cli("set-weight", "invoices", "101", "-f", str(path))
    assert refused.returncode == 2 and "0 to 100" in refused.stderr
    assert changes(manual, path.read_text())[1] == [("    weight: 10", "    weight: 40")]
