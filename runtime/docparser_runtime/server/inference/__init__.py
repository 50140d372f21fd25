"""The engine side of a parse: pages in (``document_loader``), batches to the engine
(``batcher``). Endpoints reach it only through ``ParseService``."""
