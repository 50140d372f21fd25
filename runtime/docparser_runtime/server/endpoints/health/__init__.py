"""``/livez``, ``/readyz``, ``/health``, ``/metrics``: probes and scraping."""
