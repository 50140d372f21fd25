"""``POST /internal/v1/shadow/parse`` (the canary's end of the mirror, internal credential)
and ``GET /admin/v1/shadow/worst`` (the worst disagreements kept, admin key)."""
