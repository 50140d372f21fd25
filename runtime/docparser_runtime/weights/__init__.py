"""Model weights: manifests of per-file sha256, verified fetching, and the serve-time gate."""
