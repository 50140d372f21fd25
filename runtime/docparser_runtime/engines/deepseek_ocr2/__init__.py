"""The DeepSeek-OCR-2 engine (torch + transformers) and its private helpers: generation,
grounding and prompts. Imported only when this engine is asked for (``engines.registry``)."""
