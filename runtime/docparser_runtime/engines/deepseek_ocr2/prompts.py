"""The prompts DeepSeek-OCR-2 was trained on, one per parse mode.

These are the official DeepSeek-OCR / DeepSeek-OCR-2 prompts (model card and
``run_dpsk_ocr*.py``): the model only behaves well on the exact phrasings it saw in
training, so they are constants here, not settings.

* ``markdown``: ``<|grounding|>Convert the document to markdown.`` -> Markdown with a
  ``<|ref|>label<|/ref|><|det|>[[x1,y1,x2,y2]]<|/det|>`` header before each layout block
  (title, text, table, image, ...); blocks come from the headers, content drops them.
* ``text``: ``Free OCR.`` -> plain text without layout tags (no blocks).
* ``grounding``: ``<|grounding|>OCR this image.`` -> every text region with its box, the
  official prompt for "OCR with locations" on arbitrary images (not only documents).

``<image>`` is the processor's placeholder; it expands to ``vision_tokens + 1`` tokens.
"""

from __future__ import annotations

from docparser_runtime.engines.base import Mode

IMAGE_PLACEHOLDER = "<image>"

PROMPTS: dict[str, str] = {
    "markdown": f"{IMAGE_PLACEHOLDER}\n<|grounding|>Convert the document to markdown.",
    "text": f"{IMAGE_PLACEHOLDER}\nFree OCR.",
    "grounding": f"{IMAGE_PLACEHOLDER}\n<|grounding|>OCR this image.",
}


def prompt_for(mode: Mode) -> str:
    """The prompt for ``mode``; ``ValueError`` for an unknown mode (a caller bug)."""
    try:
        return PROMPTS[mode]
    except KeyError:
        known = sorted(PROMPTS)
        raise ValueError(f"unknown parse mode {mode!r}; expected one of {known}") from None
