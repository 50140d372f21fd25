"""The shadow canary's runtime side (issue 24): a stable pod mirrors a sample of the parse
requests it answered to the canary, after its client has the answer, and compares the two
texts page by page (``config``, ``sampler``, ``sender``, ``compare``, ``metrics``, ``worst``)."""
