"""docs/architecture.md names every module, so the map a newcomer reads cannot fall behind.

Each module is named by its path inside its layer's package (``render/deployment.py`` under
core, ``providers/pods.py`` under analysis) in backticks; a new module without a sentence in the
map fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "architecture.md").read_text()
PACKAGES = {
    "operator": REPO / "operator" / "docparser_operator",
    "runtime": REPO / "runtime" / "docparser_runtime",
}


def _modules(root: Path) -> list[Path]:
    return sorted(
        p.relative_to(root)
        for p in root.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts
    )


@pytest.mark.parametrize("distribution", sorted(PACKAGES))
def test_every_module_is_named_in_the_architecture_map(distribution: str) -> None:
    root = PACKAGES[distribution]
    missing = []
    for module in _modules(root):
        layer, *rest = module.parts
        inner = "/".join(rest) if rest else layer
        if f"`{inner}`" not in DOC or (rest and f"`{layer}/`" not in DOC):
            missing.append(str(module))
    assert not missing, f"docs/architecture.md does not name: {missing}"


@pytest.mark.parametrize("distribution", sorted(PACKAGES))
def test_the_check_sees_modules(distribution: str) -> None:
    assert len(_modules(PACKAGES[distribution])) > 40
