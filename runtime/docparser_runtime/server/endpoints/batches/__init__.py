"""``/v1/batches``: the OpenAI-compatible batch routes, the line runner and the worker's life."""
