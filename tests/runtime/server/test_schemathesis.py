"""A bounded schemathesis run against the live server's own OpenAPI schema: generated
valid and invalid requests to every operation must never produce a 5xx. The server runs
in a real process with the production app and preprocessing; only the engine is the
deterministic test engine, so the run is bounded by example counts (and a wall-clock
budget), not by OCR speed."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from live_server import LiveServer
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 15  # per operation and generation mode
TIME_BUDGET_S = 240.0  # wall-clock cap on the whole run


@pytest.fixture(scope="module")
def live():
    env = {"DOCPARSER_DEFAULT_TIER": 0, "DOCPARSER_MAX_NEW_TOKENS_LIMIT": 512}
    with LiveServer(env=env, gated_delay_s=0.0) as server:
        yield server


def test_no_generated_request_yields_a_server_error(live):
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {op.label for op in operations}
    assert {"POST /v1/document/parse", "POST /v1/jobs", "POST /v1/chat/completions"} <= labels
    started = time.monotonic()
    failures: list[str] = []
    calls = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def run(case) -> None:
                nonlocal calls
                if time.monotonic() - started > TIME_BUDGET_S:
                    return
                calls += 1
                response = case.call(base_url=live.url, timeout=30)
                case.validate_response(response, checks=[not_a_server_error])

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing to break: no parameters
            except Exception as exc:  # collect all operations' failures, then report
                failures.append(f"{operation.label} [{mode.value}]: {exc}")
    assert not failures, "\n\n".join(failures)
    assert calls >= len(operations) * 2  # the run really exercised every operation
