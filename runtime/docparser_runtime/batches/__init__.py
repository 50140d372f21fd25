"""OpenAI-compatible batches: uploaded JSONL files, their lines run once each at the lowest
priority, and the output assembled in line order (server/endpoints/files, .../batches)."""
