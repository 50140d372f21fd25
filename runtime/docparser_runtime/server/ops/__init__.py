"""Running the process: lifecycle, drain, metrics, tracing, request log, log limits."""
