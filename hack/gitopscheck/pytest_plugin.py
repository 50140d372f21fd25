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
def gitops_check_optional() -> Iterator[GitOpsCheck | None]:
    """One gitopscheck process for the session, or None when it is not built: the rollout
    tests then check their own conditions only (the report header says the tools were not)."""
    try:
        check = GitOpsCheck.start()
    except GitOpsCheckUnavailable:
        yield None
        return
    with check:
        yield check


@pytest.fixture
def gitops_check(gitops_check_optional: GitOpsCheck | None) -> GitOpsCheck:
    """The session's gitopscheck; skips with the build hint when it is not built."""
    if gitops_check_optional is None:
        pytest.skip(f"gitopscheck is not built; {BUILD_HINT}")
    return gitops_check_optional
