"""HTTP layer: FastAPI app, micro-batcher, metrics. Talks only to ``engines.base.Engine``."""
