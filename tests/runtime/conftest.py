"""Shared fixtures for runtime tests.

``tiny_model_dir``: a tiny random-weight DeepSeek-OCR-2 (real architecture, tiny tokenizer,
real processor) written once per session with ``save_pretrained``; tests load it through the
same ``from_pretrained`` path as production weights. Skips when the ``deepseek`` extra
(torch + transformers) is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from redis_server import redis_server, redis_url  # noqa: F401  (real redis-server fixtures)


def _deepseek_extra_missing() -> str | None:
    for module in ("torch", "transformers", "tokenizers"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = _deepseek_extra_missing()
    if missing is not None:
        pytest.skip(
            f"{missing} is not importable: install the deepseek extra "
            "(pip install -e './runtime[deepseek]', or `make install-test`) to run tiny-model tests"
        )
    import torch
    from tiny_deepseek import build_tiny_model

    # The tiny model's ops are microseconds long: intra-op threads only add spin-wait and
    # hand-off cost (4x slower measured on a shared 2-core box), so tests run it on one.
    torch.set_num_threads(1)
    return build_tiny_model(tmp_path_factory.mktemp("tiny-deepseek-ocr2"))
