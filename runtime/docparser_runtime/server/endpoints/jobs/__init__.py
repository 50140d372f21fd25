"""``/v1/jobs``: the asynchronous job routes and the runner that serves stored jobs."""
