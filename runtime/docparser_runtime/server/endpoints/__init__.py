"""One subpackage per HTTP endpoint family, after vLLM's ``entrypoints/openai/<endpoint>/``:
``api_router`` (the routes), ``protocol`` (the request schema), ``serving`` (the use case)."""
