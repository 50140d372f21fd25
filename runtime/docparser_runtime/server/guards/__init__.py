"""Checks that stand before the work: API keys, rate limits, slow clients, URL allow-list."""
