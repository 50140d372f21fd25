"""pytest wiring for gitopscheck: the session fixture ``gitops_check`` and a report header line.

WHY a plugin (registered by tests/conftest.py): the Argo CD script tests and the rollout
transition tests on the real API server share one checker process, and the header must say
whether Flux's and Argo CD's verdicts were checked at all, so a skip is never read as a pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .checker import BUILD_HINT, GitOpsCheck, GitOpsCheckUnavailable, binary


def pytest_report_header(config: pytest.Config) -> str:
    path = binary()
    if path is None:
        return f"gitopscheck: NOT built: Flux/Argo CD verdicts are not checked; {BUILD_HINT}"
    return f"gitopscheck: {path} (kstatus cli-utils v0.37.2, gopher-lua v1.1.2)"


@pytest.fixture(scope="session")
def gitops_check() -> Iterator[GitOpsCheck]:
    """One gitopscheck process for the session; skips with the build hint when not built."""
    try:
        check = GitOpsCheck.start()
    except GitOpsCheckUnavailable as exc:
        pytest.skip(str(exc))
    with check:
        yield check
