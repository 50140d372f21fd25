"""Engine registry: names map to engines; rapidocr never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from docparser_runtime.engines import registry
from docparser_runtime.settings import Settings


def test_unknown_engine_is_a_clear_error():
    with pytest.raises(ValueError, match="known engines: deepseek-ocr2, rapidocr"):
        registry.engine_class("tesseract")


def test_rapidocr_engine_is_created_without_importing_torch():
    code = (
        "import sys\n"
        "from docparser_runtime.engines.registry import create_engine\n"
        "from docparser_runtime.settings import Settings\n"
        "engine = create_engine(Settings(engine='rapidocr'))\n"
        "print(engine.name)\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out == ["rapidocr", "False", "False"]


def test_every_registered_engine_resolves_to_an_engine_class():
    from docparser_runtime.engines.base import Engine

    for name in registry.ENGINES:
        cls = registry.engine_class(name)
        assert issubclass(cls, Engine) and cls.name == name


def test_create_engine_returns_an_unloaded_engine_of_the_chosen_kind():
    engine = registry.create_engine(Settings(engine="rapidocr"))
    assert engine.name == "rapidocr"
