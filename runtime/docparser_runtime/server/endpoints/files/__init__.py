"""``/v1/files``: the OpenAI-compatible file routes of the batch API."""
