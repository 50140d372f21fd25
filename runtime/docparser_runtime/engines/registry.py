"""Engine name -> engine instance, importing only the chosen engine.

Why lazy imports: the embedded ``rapidocr`` engine must start without torch installed
(``make run`` stays light), so the DeepSeek-OCR-2 module (torch, transformers) is only
imported when that engine is asked for.
"""

from __future__ import annotations

import importlib

from docparser_runtime.engines.base import Engine
from docparser_runtime.errors import WeightsError
from docparser_runtime.settings import Settings

# name -> "module:Class"; each class offers ``from_settings(settings)``.
ENGINES: dict[str, str] = {
    "rapidocr": "docparser_runtime.engines.rapidocr.engine:RapidOcrEngine",
    "deepseek-ocr2": "docparser_runtime.engines.deepseek_ocr2.engine:DeepseekOcr2Engine",
}


def engine_class(name: str) -> type[Engine]:
    try:
        target = ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise ValueError(f"unknown engine {name!r}; known engines: {known}") from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing_dependency = not (exc.name or "").startswith("docparser_runtime")
        hint = " (install the 'deepseek' extra)" if missing_dependency else ""
        raise WeightsError(f"engine {name!r} is not installed: {exc}{hint}") from exc
    engine_type: type[Engine] = getattr(module, class_name)
    return engine_type


def create_engine(settings: Settings) -> Engine:
    """A new, not yet loaded engine for ``settings.engine`` (call ``load()`` next)."""
    return engine_class(settings.engine).from_settings(settings)
